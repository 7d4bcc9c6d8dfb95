"""The experiment file's shape: its published JSON Schema (experiment.schema.json, the single
source of the file's shape) and each error it finds said as "file:line: key: message", with a
"did you mean" where a key is misspelt; what it rejected is pruned so later checks see only
what it accepted."""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from .sourcefile import Path_, SourceFile, key_name, suggest


@cache
def schema() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath("experiment.schema.json").read_text())


@cache
def validator() -> jsonschema.Draft202012Validator:
    """The schema's validator, its `$ref`s to `$defs` written out in place: looking each up
    as it is met was two thirds of checking a 10,000-host file (2.5 s -> 0.8 s)."""
    full = schema()
    return _EXACT(_inline(full, full.get("$defs", {}), ()))


def check_swept_values(src: SourceFile, data: dict[str, Any], key: str, values: list[Any],
                       apply: Callable[[dict[str, Any], str, Any], object],
                       inside: Callable[[tuple[Any, ...]], bool], what: str) -> None:
    """Each value of a swept setting `key` makes a file the schema takes, so a point's file is
    refused at check, not at its run: `apply` sets it on a copy of `data` (the campaign's own
    sections gone), and each error the schema finds where `inside` says is said of `what`."""
    where: Path_ = ("sweep", "params", key)
    for i, value in enumerate(values):
        point = copy.deepcopy({k: v for k, v in data.items() if k not in ("sweep", "repeat", "hooks")})
        apply(point, key, value)
        for error in validator().iter_errors(point):
            at = tuple(error.absolute_path)
            if inside(at):
                with src.checking():
                    src.error(f"{value!r} makes {what} one the file cannot have: "
                              f"{key_name(at)}: {message(error)}", (*where, i))

def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    """The `pattern` keyword as the schema's dialect (ECMA-262) reads it: its `$` is the end of
    the text, where Python's also matches before a final newline ("nl\\n" was a name)."""
    exact = pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith("\\$") else pattern
    if validator.is_type(instance, "string") and not re.search(exact, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_EXACT = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _pattern})


def _inline(node: Any, defs: dict[str, Any], within: tuple[str, ...]) -> Any:
    """`node` with each `$ref` to a definition replaced by the definition, except where a
    definition refers to itself (that `$ref` stays, and resolves as before). A `$ref` beside
    other keywords becomes an `allOf` beside them, so each error is the definition's own."""
    if isinstance(node, list):
        return [_inline(v, defs, within) for v in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and ref[8:] in defs and ref[8:] not in within:
        name = ref[8:]
        target = _inline(defs[name], defs, (*within, name))
        rest = {k: _inline(v, defs, within) for k, v in node.items() if k != "$ref"}
        return {"allOf": [target], **rest} if rest else target
    return {k: _inline(v, defs, within) for k, v in node.items()}


def schema_error(src: SourceFile, error: jsonschema.ValidationError) -> None:
    path: Path_ = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = error.schema.get("properties", {})
        for key in sorted(k for k in error.instance if k not in allowed):  # every one, not the first
            with src.checking():
                src.error(f"unknown key '{key}'{suggest(key, allowed)}", (*path, key))
        return
    if error.validator in ("oneOf", "anyOf") and (fitting := _fitting_branch(error)):
        for sub in fitting:
            with src.checking():
                schema_error(src, sub)
        return
    if error.validator in ("oneOf", "anyOf", "type"):
        src.error(message(error), path)
    if error.validator == "required":
        missing = error.message.split("'")[1]
        allowed = error.schema.get("properties", {})
        unknown = [k for k in error.instance if k not in allowed]
        if difflib.get_close_matches(missing, unknown, n=1, cutoff=0.6):
            return  # the unknown key's own error says "did you mean '{missing}'"
        src.error(f"missing key '{missing}'", path)
    if error.validator == "pattern":
        what = error.schema.get("title", "value")
        src.error(f"{error.instance!r} is not a valid {what} "
                  f"({error.schema.get('description', error.validator_value)})", path)
    src.error(error.message, path)


def message(error: jsonschema.ValidationError) -> str:
    """The schema's error in the file's words: a value of the wrong type (or of no branch's
    type) says what would do, with the unit a bare number lacked ("expected a delay (...),
    got the number 20: did you mean '20ms'?"); any other error as jsonschema says it."""
    if error.validator == "type":
        return f"expected {_expected(error.schema)}, got {_got(error.instance)}" + _unit_hint(
            error.schema, error.instance)
    if error.validator in ("oneOf", "anyOf") and _of_no_branchs_type(error):
        branches = error.validator_value
        return (f"expected {' or '.join(_expected(b) for b in branches)}, got {_got(error.instance)}"
                + next(filter(None, (_unit_hint(b, error.instance) for b in branches)), ""))
    return error.message


def _of_no_branchs_type(error: jsonschema.ValidationError) -> bool:
    """Whether a oneOf/anyOf's value has the type of none of its branches (each refused it at
    its root by type), rather than fitting several or failing inside one."""
    refused = {sub.schema_path[0] for sub in error.context or ()
               if sub.validator == "type" and not sub.relative_path}
    return isinstance(error.validator_value, list) and len(refused) == len(error.validator_value)


# The unit a bare number most likely meant, of those a string pattern takes (its `(a|b)$` end).
LIKELY_UNITS = ("ms", "mbit", "s")


def _expected(schema: dict[str, Any]) -> str:
    """What a schema takes, in words: its title and description where it has them ("a delay
    (with its unit: 250us, 10ms, 0.5s)"), a mapping's keys, else its type."""
    about = schema.get("description", "")
    if "title" in schema and about:
        title = f"a {schema['title']}"
        # "a delay with its unit: 250us, 10ms" -> "a delay (with its unit: 250us, 10ms)"
        return f"{title} ({about[len(title):].lstrip(' :') if about.lower().startswith(title) else about})"
    wanted = schema.get("type", "a value of another shape")
    if wanted == "object" and schema.get("properties"):
        return f"a mapping ({', '.join(schema['properties'])})"
    wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
    return wanted + (f" ({about})" if "pattern" in schema and about else "")


def _got(instance: Any) -> str:
    kind = {bool: "a boolean", int: "the number", float: "the number", str: "the string", list: "a list",
            dict: "a mapping", type(None): "null"}.get(type(instance), type(instance).__name__)
    return f"{kind} {instance!r}" if not isinstance(instance, list | dict) else kind


def _unit_hint(schema: dict[str, Any], instance: Any) -> str:
    """": did you mean '20ms'?" where a number was given for a string with a unit."""
    pattern = schema.get("pattern", "")
    if schema.get("type") != "string" or isinstance(instance, bool) or not isinstance(instance, int | float):
        return ""
    if pattern.endswith("%$"):
        units = ["%"]
    elif m := re.search(r"\(([a-z|]+)\)\$$", pattern):
        units = m.group(1).split("|")
    else:
        return ""
    unit = next((u for u in LIKELY_UNITS if u in units), units[0])
    return f": did you mean '{instance:g}{unit}'?"


def _fitting_branch(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """The errors of the one branch of a oneOf/anyOf whose type the value has (a sweep's
    range, not its list), so that they are said as themselves ("unknown key 'stpe'") and not
    as "not valid under any of the given schemas"; none if no one branch fits."""
    branches: dict[Any, list[jsonschema.ValidationError]] = {}
    for sub in error.context or ():
        branches.setdefault(sub.schema_path[0], []).append(sub)
    fitting = [subs for subs in branches.values()
               if not any(e.validator == "type" and not e.relative_path for e in subs)]
    return fitting[0] if len(fitting) == 1 else []


def prune(data: Any, error: jsonschema.ValidationError) -> bool:
    """Removes from the file's data what the schema rejected, so that the checks after the
    schema see only what it accepted; False when nothing could be removed."""
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = error.schema.get("properties", {})
        for key in [k for k in error.instance if k not in allowed]:
            del error.instance[key]
        return True
    *where, last = error.absolute_path or [None]
    if error.validator == "required" or not isinstance(last, str):
        return False
    for part in where:
        data = data[part]
    data.pop(last, None)
    return True
