"""The instrumentation entities a program's file declares, read without running it (its
Python syntax tree), so that `check` can say a stream pattern or a metric names none.

What a file declares is known only where every declaration names its group and name in
literals and nothing it imports from beside it could declare more; otherwise the file's
entities are unknown and nothing is said of them.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import Any

from netspec.nodelib.instrument import selects

from .model import Component
from .sourcefile import SourceFile

# nodelib's declaring functions and the kind of entity each makes.
DECLARERS = {"event": "event", "interval": "interval", "counter": "counter",
             "histogram": "histogram", "samples": "samples"}
# The daemon's own entities (its phase records, CAMP, clksync): any name in these groups.
NODE_GROUPS = ("NETSPECD", "CAMP", "CLKSYNC")


@dataclass(frozen=True)
class Declared:
    """The entities of a file as (kind, "GROUP/name"), and whether that is all of them."""

    entities: frozenset[tuple[str, str]]
    complete: bool


def _nodelib_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The names the file calls nodelib by (`nodelib` in `nodelib.interval(...)`) and the
    declaring functions it imported by name (`interval`, or what it renamed it to)."""
    modules, functions = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "netspec":
            modules |= {a.asname or a.name for a in node.names if a.name == "nodelib"}
        elif isinstance(node, ast.ImportFrom) and node.module == "netspec.nodelib":
            functions |= {a.asname or a.name for a in node.names if a.name in DECLARERS}
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.name == "netspec.nodelib" and a.asname}
    return modules, functions


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
    entities, complete = set(), not _local_imports(tree, path.parent)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in modules:
            kind = DECLARERS.get(func.attr)
        elif isinstance(func, ast.Name) and func.id in functions:
            kind = DECLARERS[func.id]
        else:
            continue
        if kind is None:
            continue
        parts = node.args[:2]
        if len(parts) == 2 and all(isinstance(p, ast.Constant) and isinstance(p.value, str) for p in parts):
            entities.add((kind, f"{parts[0].value}/{parts[1].value}"))  # type: ignore[attr-defined]
        else:
            complete = False
    return Declared(frozenset(entities), complete)


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
