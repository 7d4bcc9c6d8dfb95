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
                              f"{key_name(at)}: {error.message}", (*where, i))

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
    if error.validator == "required":
        missing = error.message.split("'")[1]
        allowed = error.schema.get("properties", {})
        unknown = [k for k in error.instance if k not in allowed]
        if difflib.get_close_matches(missing, unknown, n=1, cutoff=0.6):
            return  # the unknown key's own error says "did you mean '{missing}'"
        src.error(f"missing key '{missing}'", path)
    if error.validator == "type":
        wanted = error.validator_value
        wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
        src.error(f"expected {wanted}, got {type(error.instance).__name__} "
                  f"{error.instance!r}", path)
    if error.validator == "pattern":
        what = error.schema.get("title", "value")
        src.error(f"{error.instance!r} is not a valid {what} "
                  f"({error.schema.get('description', error.validator_value)})", path)
    src.error(error.message, path)


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
