"""An experiment file as the checks see it: its text, its YAML data, the line of every key and
item, and the problems found in it so far (each check records its own; the next goes on)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml
from netspec.protocol.errors import ConfigError, ConfigErrors

Path_ = tuple[str | int, ...]
_MERGE = "tag:yaml.org,2002:merge"
_T = TypeVar("_T")


def key_name(path: Path_) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


class SourceFile:
    """The file's text, its data, the line of every key and item in it, and the problems
    found in it so far: each check records its own and the next check goes on."""

    def __init__(self, path: Path, text: str):
        self.path, self.text = path, text
        self.lines: dict[Path_, int] = {}
        self.errors: list[ConfigError] = []
        self.warnings: list[str] = []
        # Where the schema found a problem, and whether the bad part was pruned: a later
        # check's complaint about such an item (or, if it is still there, about anything in
        # it) is a consequence of that problem, not news.
        self.misshapen: list[tuple[str, bool]] = []
        # Composed once, with libyaml where PyYAML has it: a fleet's file of 10,000 hosts
        # took the pure-Python loader over ten seconds, twice (the nodes, then the data).
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
        try:
            node = loader.get_single_node()
            # Walked before it is constructed, which would fold a merge key's pairs into the
            # mapping in place, where an overridden key looks like one given twice.
            if node is not None:
                self._walk(node, ())
            self.data = loader.construct_document(node) if node is not None else None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise ConfigError(f"not valid YAML: {getattr(exc, 'problem', exc)}", str(path),
                              mark.line + 1 if mark else None) from exc
        finally:
            loader.dispose()

    def _walk(self, node: yaml.Node, path: Path_) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node in given_twice(node):
                with self.checking():
                    self.error(f"key '{key_node.value}' appears twice", (*path, key_node.value),
                               key_node.start_mark.line + 1)
            # Construction is given the pairs merged here: PyYAML's own merge lets a later
            # mapping of `<<`'s list override an earlier one, or not, by the identity of
            # their keys' strings.
            node.value = merged_pairs(node)
            for key_node, value_node in node.value:
                self.lines[(*path, key_node.value)] = key_node.start_mark.line + 1
                self._walk(value_node, (*path, key_node.value))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.lines[(*path, i)] = item.start_mark.line + 1
                self._walk(item, (*path, i))

    def line(self, path: Path_) -> int | None:
        for n in range(len(path), 0, -1):
            if path[:n] in self.lines:
                return self.lines[path[:n]]
        return 1

    def error(self, message: str, path: Path_, line: int | None = None) -> NoReturn:
        """Raises ConfigError naming the file, the line of `path` (or `line`) and the key."""
        raise ConfigError(message, str(self.path), line or self.line(path), key_name(path))

    @contextmanager
    def checking(self) -> Iterator[None]:
        """Records a ConfigError raised inside, so that the checks after it still run."""
        try:
            yield
        except ConfigErrors as exc:
            self.errors.extend(exc.errors)
        except (KeyError, TypeError, AttributeError, ValueError, IndexError):
            # A check tripped over a shape the schema rejected, and that is already said.
            if not self.errors:
                raise
        except ConfigError as exc:
            if not any(exc.key == item or (not pruned and exc.key.startswith((f"{item}.", f"{item}[")))
                       for item, pruned in self.misshapen):
                self.errors.append(exc)

    def pruned_within(self, path: Path_) -> bool:
        """Whether the schema refused, and pruned, something inside `path` (said already)."""
        return any(item.startswith((f"{key_name(path)}.", f"{key_name(path)}["))
                   for item, pruned in self.misshapen if pruned)

    def checked(self, check: Callable[..., _T], *args: Any) -> _T | None:
        """`check(*args)`, or None when it raised a ConfigError (recorded)."""
        with self.checking():
            return check(*args)
        return None

    def raise_errors(self) -> None:
        if self.errors:
            raise ConfigErrors(self.errors)

    def warn(self, message: str, path: Path_) -> None:
        self.warnings.append(str(ConfigError(message, str(self.path), self.line(path), key_name(path))))

    def known(self, what: str, name: str, names: Collection[str], path: Path_) -> None:
        """Raises ConfigError, with a "did you mean", unless `name` is one of `names`."""
        if name not in names:
            self.error(f"unknown {what} '{name}'{suggest(name, names)}", path)


def suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def given_twice(node: yaml.MappingNode) -> list[yaml.Node]:
    """The keys of a mapping given a second time in it (a merge key `<<` too)."""
    seen: set[tuple[bool, Any]] = set()
    twice = []
    for key_node, _ in node.value:
        key = (key_node.tag == _MERGE, key_node.value)
        if key in seen:
            twice.append(key_node)
        seen.add(key)
    return twice


def merged_pairs(node: yaml.MappingNode,
                 within: frozenset[int] = frozenset()) -> list[tuple[yaml.Node, yaml.Node]]:
    """A mapping's pairs as YAML 1.1's merge key reads them: its own keys, and each key of the
    mappings `<<` names that it does not give itself, a mapping earlier in `<<`'s list before
    a later one; in the order written. A merged key's line is the line it is written on in
    the mapping merged."""
    own = {key_node.value for key_node, _ in node.value if key_node.tag != _MERGE}
    pairs: dict[Any, tuple[yaml.Node, yaml.Node]] = {}
    for key_node, value_node in node.value:
        if key_node.tag != _MERGE:
            pairs[key_node.value] = (key_node, value_node)
            continue
        sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        for source in sources:
            # Not a mapping: construction refuses it, naming its line; one merged into itself
            # adds nothing it does not already have.
            if isinstance(source, yaml.MappingNode) and id(source) not in within:
                for pair in merged_pairs(source, within | {id(node)}):
                    if pair[0].value not in own:
                        pairs.setdefault(pair[0].value, pair)
    return list(pairs.values())
