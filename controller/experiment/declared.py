"""The instrumentation entities a program's file declares and the phases it registers, read
without running it (its Python syntax tree), so that `check` can say a stream pattern or a
metric names none, or a step needs more participants than can register its phase.

What a file declares is known only where every declaration names its group and name (or
its phase) in literals and nothing it imports from beside it could declare more; otherwise
the file's entities (or phases) are unknown and nothing is said of them.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import Any

from netspec.datastream.instrument import selects

from .model import Component
from .sourcefile import SourceFile

# nodelib's declaring functions and the kind of entity each makes.
DECLARERS = {"event": "event", "interval": "interval", "counter": "counter",
             "histogram": "histogram", "samples": "samples"}
# The daemon's own entities (its phase records, CAMP, clksync): any name in these groups.
NODE_GROUPS = ("NETSPECD", "CAMP", "CLKSYNC")


@dataclass(frozen=True)
class Declared:
    """The entities of a file as (kind, "GROUP/name") and the phases it registers, each with
    whether that is all of them."""

    entities: frozenset[tuple[str, str]]
    complete: bool
    phases: frozenset[str] = frozenset()
    phases_complete: bool = False


def _nodelib_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names the file calls nodelib by (`nodelib` in `nodelib.interval(...)`) and the
    functions it imported from it by name (`interval`, or what it renamed it to)."""
    modules, functions = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "netspec":
            modules |= {a.asname or a.name for a in node.names if a.name == "nodelib"}
        elif isinstance(node, ast.ImportFrom) and node.module == "netspec.nodelib":
            functions |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.name == "netspec.nodelib" and a.asname}
    return modules, functions


def _nodelib_call(node: ast.expr, modules: set[str], functions: set[str]) -> str | None:
    """The nodelib function `node` names (`nodelib.interval`, or `interval` imported), if any."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
        return node.attr
    if isinstance(node, ast.Name) and node.id in functions:
        return node.id
    return None


def _literals(args: list[ast.expr]) -> list[str] | None:
    if all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args):
        return [a.value for a in args]  # type: ignore[attr-defined]
    return None


def _local_imports(tree: ast.Module, folder: Path) -> bool:
    """Whether the file imports a module from beside it (which could declare entities too)."""
    for node in ast.walk(tree):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        if isinstance(node, ast.ImportFrom) and node.level:
            return True
        for name in names:
            top = name.partition(".")[0]
            if top and ((folder / f"{top}.py").is_file() or (folder / top / "__init__.py").is_file()):
                return True
    return False


def declared(program: str) -> Declared:
    """The entities the program file `program` declares; incomplete if it cannot be read."""
    try:
        return _declared(program, Path(program).stat().st_mtime_ns)
    except OSError:
        return Declared(frozenset(), False)


@cache
def _declared(program: str, mtime_ns: int) -> Declared:
    """declared(), once per version of the file (a fleet's components share a few programs)."""
    path = Path(program)
    try:
        tree = ast.parse(path.read_bytes(), str(path))
    except (OSError, SyntaxError, ValueError):
        return Declared(frozenset(), False)
    modules, functions = _nodelib_names(tree)
    entities, phases = set(), set()
    complete = phases_complete = not _local_imports(tree, path.parent)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for deco in node.decorator_list:  # @nodelib.phase() takes the function's name
                if isinstance(deco, ast.Call) and _nodelib_call(deco.func, modules, functions) == "phase" \
                        and not deco.args and not deco.keywords:
                    phases.add(node.name)
        if not isinstance(node, ast.Call):
            if _nodelib_call(node, modules, functions) == "Application":  # type: ignore[arg-type]
                phases_complete = False  # an application of its own registers what it will
            continue
        called = _nodelib_call(node.func, modules, functions)
        if called in DECLARERS:
            names = _literals(node.args[:2])
            if names is not None and len(names) == 2:
                entities.add((DECLARERS[called], "/".join(names)))
            else:
                complete = False
        elif called in ("register", "phase") and (node.args or node.keywords):
            names = _literals(node.args[:1]) if node.args and not node.keywords else None
            if names:
                phases.add(names[0])
            else:
                phases_complete = False
    return Declared(frozenset(entities), complete, frozenset(phases), phases_complete)


def takes_part(component: Component, phase: str) -> bool:
    """Whether `component` may take part in a step of `phase` (False only where its program's
    file says every phase it registers and `phase` is not one of them)."""
    if component.program is None:
        return phase == "collect" or phase in (component.start, component.stop)
    if phase in ("launch", "collect"):
        return True
    d = declared(component.program)
    return not d.phases_complete or phase in d.phases


def of_programs(programs: list[str]) -> frozenset[tuple[str, str]] | None:
    """Every entity the programs declare, or None if any of them may declare more."""
    found: set[tuple[str, str]] = set()
    for program in programs:
        d = declared(program)
        if not d.complete:
            return None
        found |= d.entities
    return frozenset(found)


def of_components(components: list[Component]) -> frozenset[tuple[str, str]] | None:
    """Every entity the components declare, or None if any may declare more: a plain command
    may use nodelib too, and what it runs is not read."""
    if any(c.program is None for c in components):
        return None
    return of_programs([c.program for c in components if c.program is not None])


def matches_any(pattern: str, names: list[str]) -> bool:
    """Whether `pattern` (GROUP, or GROUP/name with wildcards) selects one of `names`
    ("GROUP/name") or a node entity."""
    return any(selects([pattern], n) for n in names) or any(
        fnmatchcase(group, pattern.partition("/")[0]) for group in NODE_GROUPS)


def close_to(word: str, names: list[str]) -> str | None:
    """The name (or group) `word` likely meant: equal but for case, else the nearest spelling."""
    choices = sorted({*names, *(n.partition("/")[0] for n in names)})
    same = [c for c in choices if c.lower() == word.lower()]
    if same:
        return same[0]
    lowered = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


def listing(names: list[str], most: int = 8) -> str:
    """`names` for a message: the first `most` of them, and how many more."""
    shown = ", ".join(names[:most]) or "none"
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def check_stream_patterns(src: SourceFile, streams: dict[str, Any],
                          components: tuple[Component, ...]) -> None:
    """Warns of each stream pattern (enable, trigger) that selects no entity the stream's
    programs declare, where what they declare is known."""
    for name, stream in streams.items():
        listed = stream.get("components")
        entities = of_components([c for c in components if not listed or c.name in listed])
        if entities is None:
            continue
        names = sorted(n for _, n in entities)
        for key in ("enable", "trigger"):
            for i, pattern in enumerate(stream.get(key) or ()):
                if matches_any(pattern, names):
                    continue
                close = close_to(pattern, names)
                src.warn(f"'{pattern}' matches no entity the stream's programs declare "
                         f"({listing(names)}) nor the daemon's ({', '.join(NODE_GROUPS)})"
                         + (f" (did you mean '{close}'?)" if close else ""), ("streams", name, key, i))
