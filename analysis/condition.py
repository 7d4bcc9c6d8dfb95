"""A `select` node's `where:`, the one piece of SQL an experiment file (or a received run's
record, which anyone may have written) gives the analysis graph: parsed by DuckDB and held to
a condition over the input's own columns, never a query. The graph runs it besides on a
connection that reaches no file outside the result set (`confine`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

# What a condition may be made of: columns, constants, comparisons, and/or/not, IN, BETWEEN,
# CASE, casts and scalar functions. A subquery (which reads files: read_text('/etc/shadow')),
# a window, a lambda, a parameter or a star is not a condition on one row.
ALLOWED = frozenset({"COLUMN_REF", "CONSTANT", "COMPARISON", "CONJUNCTION", "OPERATOR", "BETWEEN",
                     "CAST", "TYPE", "CASE", "FUNCTION", "COLLATE"})
_TEMPLATE = "SELECT * FROM _input WHERE ({})"


def check_where(text: Any) -> str:
    """`text` if it is one SQL condition (`tag < 3 and name glob 'STIM*'`) on the input's rows.

    Raises:
        ValueError: naming what in it is not allowed, or why it does not parse.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"where: {text!r} is not an SQL condition")
    statement = _parsed(_TEMPLATE.format(text), text)
    where = statement["node"].pop("where_clause", None)
    template = _parsed(_TEMPLATE.format("TRUE"), "TRUE")
    template["node"].pop("where_clause")
    if where is None or _located(statement) != _located(template):  # it closed the parenthesis and went on
        raise ValueError(f"where: {text!r} is more than a condition")
    for node in _expressions(where):
        if node["class"] not in ALLOWED:
            raise ValueError(f"where: {text!r}: {node['class'].lower()} is not allowed in a condition "
                             "(columns, constants, comparisons, and/or/not, in, between, case, casts "
                             "and functions of a row)")
    return text


def _parsed(sql: str, text: str) -> dict[str, Any]:
    import duckdb

    with duckdb.connect() as db:
        parsed = json.loads(db.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])
    if parsed.get("error"):
        raise ValueError(f"where: {text!r} does not parse: {parsed.get('error_message')}")
    if len(parsed["statements"]) != 1:
        raise ValueError(f"where: {text!r} is more than a condition")
    return parsed["statements"][0]


def _located(tree: Any) -> Any:
    """`tree` without where its parts stand in the text."""
    if isinstance(tree, dict):
        return {k: _located(v) for k, v in tree.items() if not k.startswith("query_location")}
    if isinstance(tree, list):
        return [_located(v) for v in tree]
    return tree


def _expressions(tree: Any) -> list[dict[str, Any]]:
    """Every expression in `tree` (a parsed expression), however deep."""
    if isinstance(tree, list):
        return [e for v in tree for e in _expressions(v)]
    if not isinstance(tree, dict):
        return []
    here = [tree] if "class" in tree else []
    return here + [e for v in tree.values() for e in _expressions(v)]


def confine(db: duckdb.DuckDBPyConnection, out: Path) -> None:
    """From here on, `db` reads and writes files only under `out` (the result set: its tables,
    and what the graph's sinks write), for good: DuckDB refuses to widen it again."""
    db.execute(f"SET allowed_directories = ['{str(out.resolve()).replace(chr(39), chr(39) * 2)}/']")
    db.execute("SET enable_external_access = false")
