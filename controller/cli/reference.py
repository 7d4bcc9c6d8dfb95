"""The manual's generated reference pages as Markdown: every key of the experiment file from
its JSON Schema, every command and flag from `ns_control`'s parser, the exit codes from
protocol/runoutcome.py's table, and the benchmarks' headline table from bench/RESULTS.md.
The site's build (tools/docs_hook.py) and `ns_control docs` both call these, so the pages
cannot drift from what they describe; a key or an argument without a description fails
the page, naming it."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from typing import Any

from netspec.protocol.errors import NetspecError
from netspec.protocol.runoutcome import EXITS

HEADLINE = "## Headline figures"


class Undocumented(NetspecError):
    """A key of the schema or an argument of the parser without a description: the page
    that would list it is refused, naming each one."""

    def __init__(self, source: str, names: list[str]):
        self.source, self.names = source, names
        super().__init__(f"{source}: no description for {', '.join(names)}")


class DocumentedParser(argparse.ArgumentParser):
    """An ArgumentParser that keeps what it is given, through argparse's public calls alone,
    for the commands page (`commands`): each argument's Action as `add_argument` returns it
    (a parent parser's first), and each command with its help as `add_commands`' adder adds it."""

    def __init__(self, *args: Any, parents: Any = (), **kwargs: Any):
        # Its --help, added in there, is no argument of the page's.
        super().__init__(*args, parents=list(parents), **kwargs)
        self.arguments: list[argparse.Action] = [a for p in parents for a in getattr(p, "arguments", [])]
        self.commands: list[tuple[str, str, DocumentedParser]] = []

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        if hasattr(self, "arguments"):
            self.arguments.append(action)
        return action

    def add_commands(self, **kwargs: Any) -> Callable[..., DocumentedParser]:
        """Subcommands (`add_subparsers(**kwargs)`): the function that adds one, NAME with
        its `help` and the parser's other arguments, and returns its parser."""
        sub = self.add_subparsers(**kwargs)

        def command(name: str, help: str = "", **more: Any) -> DocumentedParser:
            parser = sub.add_parser(name, help=help, **more)
            self.commands.append((name, help, parser))
            return parser
        return command


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


# -- the experiment file ------------------------------------------------------------------

class _Schema:
    """One walk over the schema: each object definition ("$defs" with keys of its own) a
    section, each other definition a value type, each key a row."""

    def __init__(self, schema: dict[str, Any]):
        self.defs: dict[str, Any] = schema.get("$defs", {})
        self.sections = [name for name, d in self.defs.items() if self._objects(d)]
        self.missing: list[str] = []
        self.used_by: dict[str, list[str]] = {}
        self.within = ""  # the section's place in the file, for used_by

    @staticmethod
    def _objects(node: dict[str, Any]) -> list[dict[str, Any]]:
        """The node itself if it has keys, else those of its oneOf branches that have."""
        if "properties" in node:
            return [node]
        return [b for b in node.get("oneOf", ()) if isinstance(b, dict) and "properties" in b]

    def kind(self, node: dict[str, Any], path: str) -> str:
        """What a value is, in words, with links to the sections and value types it names."""
        ref = node.get("$ref", "")
        if ref.startswith("#/$defs/"):
            name = ref[len("#/$defs/"):]
            self.used_by.setdefault(name, []).append(f"{self.within}.{path}" if self.within else path)
            return f"[{name}](#{name.lower()})"
        if "oneOf" in node:
            return " or ".join(self.kind(b, path) for b in node["oneOf"])
        types = node.get("type")
        if types is None:
            return "string" if "enum" in node else "any"
        words = []
        for t in types if isinstance(types, list) else [types]:
            if t == "array" and isinstance(node.get("items"), dict):
                words.append(f"list of {self.kind(node['items'], path + '[]')}")
            elif t == "object" and isinstance(node.get("additionalProperties"), dict):
                key = node.get("propertyNames", {})
                key = self.kind(key, path) if "$ref" in key else key.get("title", "key")
                words.append(f"map of {key} to {self.kind(node['additionalProperties'], path + '.NAME')}")
            else:
                words.append(t)
        return " or ".join(words)

    @staticmethod
    def allowed(node: dict[str, Any]) -> str:
        said = []
        if "enum" in node:
            said.append(", ".join(f"`{v}`" for v in node["enum"]))
        low = (f">= {node['minimum']}" if "minimum" in node
               else f"> {node['exclusiveMinimum']}" if "exclusiveMinimum" in node else "")
        high = f"<= {node['maximum']}" if "maximum" in node else ""
        if low or high:
            said.append(" and ".join(w for w in (low, high) if w))
        if "minItems" in node or "maxItems" in node:
            n, m = node.get("minItems"), node.get("maxItems")
            said.append(f"{n} items" if n == m else f"at least {n} items" if m is None
                        else f"{n or 0} to {m} items")
        if "minProperties" in node:
            said.append(f"at least {node['minProperties']} key(s)")
        return "; ".join(said)

    def rows(self, node: dict[str, Any], path: str) -> Iterator[list[str]]:
        """A row for each key under `node`, depth first, its own keys right after it."""
        for branch in self._objects(node):
            required = set(branch.get("required", ()))
            for key, sub in branch["properties"].items():
                where = f"{path}.{key}" if path else key
                if "description" not in sub:
                    self.missing.append(where)
                default = f"`{json.dumps(sub['default'])}`" if "default" in sub else ""
                yield [f"`{where}`" + (" (required)" if key in required else ""), self.kind(sub, where),
                       default, self.allowed(sub), _cell(sub.get("description", ""))]
                yield from self.below(sub, where)

    def below(self, node: dict[str, Any], path: str) -> Iterator[list[str]]:
        """The rows of what a key holds: its own keys, its items' or its map's values' keys
        (a definition with keys is a section of its own, linked rather than repeated)."""
        if "$ref" in node:
            return
        yield from self.rows(node, path)
        if isinstance(node.get("items"), dict):
            yield from self.below(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            name = node.get("propertyNames", {}).get("title", "name").upper()
            yield from self.below(node["additionalProperties"], f"{path}.{name}")
        for branch in node.get("oneOf", ()):
            if "properties" not in branch:
                yield from self.below(branch, path)


TABLE = ["| key | type | default | allowed | what it is |", "|---|---|---|---|---|"]


def experiment_file(schema: dict[str, Any], source: str = "experiment.schema.json") -> str:
    """The page of every key of the experiment file, from its JSON Schema.

    Args:
        schema: the schema, as json.load gives it.
        source: its name, in the error.

    Returns:
        The page's Markdown.

    Raises:
        Undocumented: a key or a definition has no description (each one named).
    """
    walk = _Schema(schema)
    top = list(walk.rows(schema, ""))
    sections = {}
    for name in walk.sections:
        said = len(walk.missing)
        walk.within = walk.used_by.get(name, [""])[0]
        sections[name] = list(walk.rows(walk.defs[name], ""))
        walk.missing[said:] = [f"$defs.{name}: {key}" for key in walk.missing[said:]]
    values = [name for name in walk.defs if name not in walk.sections]
    walk.missing += [f"$defs.{name}" for name in walk.defs if "description" not in walk.defs[name]]
    if walk.missing:
        raise Undocumented(source, walk.missing)
    lines = ["# The experiment file", "",
             _cell(schema.get("description", "")), "",
             "Every key the experiment file takes, generated from netspec's JSON Schema "
             "(`controller/experiment/experiment.schema.json`), which `ns_control check FILE` "
             "applies. A key marked *required* must be there; the others may be left out, "
             "and a default said is what netspec takes then. NAME stands for a name of your "
             "choosing, `[]` for each item of a list.", "",
             "An editor with a YAML language server (VS Code's YAML extension, and others) checks "
             "a file against the same schema as you type, and completes its keys with these "
             "descriptions, when the file's first line names the schema: "
             "`# yaml-language-server: $schema=PATH/experiment.schema.json`, PATH relative to the "
             "file. The experiments under `experiments/` carry such a line "
             "(`$schema=../../controller/experiment/experiment.schema.json`); where netspec is "
             "installed, the schema is `netspec/controller/experiment/experiment.schema.json` in "
             "its site-packages.", "",
             "## The file", "", *TABLE, *("| " + " | ".join(r) + " |" for r in top)]
    for name in walk.sections:
        d = walk.defs[name]
        used = ", ".join(f"`{p}`" for p in dict.fromkeys(walk.used_by.get(name, [])))
        lines += ["", f"## {name}", "", _cell(d["description"]), ""]
        if used:
            lines += [f"Used by {used}.", ""]
        if "oneOf" in d:
            lines += [f"Written as {walk.kind(d, name)}; as an object, its keys:", ""]
        elif isinstance(d.get("type"), list):
            lines += [f"Written as {' or '.join(d['type'])}; as an object, its keys:", ""]
        lines += [*TABLE, *("| " + " | ".join(r) + " |" for r in sections[name])]
    lines += ["", "## Values", "", "The forms of values that several keys share.", ""]
    for name in values:
        d = walk.defs[name]
        types = d.get("type", "")
        types = " or ".join(types) if isinstance(types, list) else types
        form = [f"type {types}" if types else "", walk.allowed(d),
                f"pattern `{d['pattern']}`" if "pattern" in d else ""]
        form = "; ".join(w for w in form if w)
        lines += [f"### {name}", "", _cell(d["description"]) + ".", "", form[:1].upper() + form[1:] + ".", ""]
    return "\n".join(lines).rstrip() + "\n"


# -- the commands -------------------------------------------------------------------------

def _usage(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_usage().removeprefix("usage: ").split())


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = ""
    if action.nargs != 0:
        value = " " + (action.metavar or action.dest.upper())
    return ", ".join(f"`{o}{value}`" for o in action.option_strings)


def commands(parser: DocumentedParser) -> str:
    """The page of every command of `ns_control` and every argument, from its parser.

    Args:
        parser: the program's parser (`netspec.controller.cli.main.parser()`).

    Returns:
        The page's Markdown.

    Raises:
        Undocumented: a command or an argument has no help (each named, as `COMMAND ARG`).
    """
    prog = parser.prog
    lines = ["# Commands", "",
             f"Every command of `{prog}` and every argument it takes, generated from its argument "
             f"parser: `{prog} COMMAND --help` says the same in the terminal. Exit codes are on "
             "their own page ([exit codes](exit-codes.md)).", "",
             f"`{_usage(parser)}`", "", _cell(parser.description or ""), ""]
    missing: list[str] = []
    lines += _arguments(parser, prog, missing)
    todo = [(f"{prog} {name}", text, sub) for name, text, sub in parser.commands]
    while todo:
        name, text, sub = todo.pop(0)
        if not text:
            missing.append(name)
        lines += [f"## {name.removeprefix(prog + ' ')}", "", _cell(text), "", f"`{_usage(sub)}`", ""]
        lines += _arguments(sub, name, missing)
        todo[:0] = [(f"{name} {n}", t, s) for n, t, s in sub.commands]
    if missing:
        raise Undocumented(f"{prog}'s arguments", missing)
    return "\n".join(lines).rstrip() + "\n"


def _arguments(parser: DocumentedParser, name: str, missing: list[str]) -> list[str]:
    rows = []
    for action in parser.arguments:
        if not action.help or action.help == argparse.SUPPRESS:
            missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
            continue
        default = action.default
        shown = ("" if default in (None, False, [], argparse.SUPPRESS) or action.nargs == 0
                 else f"`{' '.join(map(str, default)) if isinstance(default, list) else default}`")
        rows.append(f"| {_argument(action)} | {shown} | {_cell(action.help)} |")
    if not rows:
        return []
    return ["| argument | default | what it does |", "|---|---|---|", *rows, ""]


# -- exit codes ---------------------------------------------------------------------------

def exit_codes() -> str:
    """The page of `ns_control`'s exit codes, from protocol/runoutcome.py's EXITS."""
    return "\n".join([
        "# Exit codes", "",
        "What `ns_control` ends with, from the one table the code takes them from "
        "(`EXITS` in `protocol/runoutcome.py`). A run's outcome (`ns_control show`, run.json's "
        "`status`, `netspec.results`' `RunOutcome`) maps onto them alike.", "",
        "| code | name | when |", "|---|---|---|",
        *(f"| {e.code} | `{e.name}` | {_cell(e.meaning)} |" for e in EXITS), ""])


# -- benchmarks ---------------------------------------------------------------------------

def benchmarks(results: str, source: str = "bench/RESULTS.md") -> str:
    """The page of netspec's headline figures: the "## Headline figures" section of
    bench/RESULTS.md (a Markdown table, up to the next "## " heading).

    Raises:
        NetspecError: the section is not there, or holds no table.
    """
    lines = results.splitlines()
    if HEADLINE not in lines:
        raise NetspecError(f"{source}: no '{HEADLINE}' section (the benchmarks page is made of it)")
    start = lines.index(HEADLINE) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    section = lines[start:end]
    if not any(line.lstrip().startswith("|") for line in section):
        raise NetspecError(f"{source}: its '{HEADLINE}' section holds no table")
    return "\n".join([
        "# Benchmarks", "",
        f"netspec's headline figures as they stand, from `{source}` (each figure's command "
        "reproduces it; the history of every measurement is below that table in the file).",
        *section]).rstrip() + "\n"
