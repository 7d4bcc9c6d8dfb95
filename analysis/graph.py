"""The filter graph of the experiment file's `analysis: graph:` section, run over a merged
result set in DuckDB.

Each node names a filter and its input (a merged table or an earlier node); its output is a
view of that name for the nodes after it. A filter is a function
`filter(rel, node, **params) -> DuckDBPyRelation | None` (None: a sink, which writes files
into node.out); its keyword-only parameters are what the file may give it, so they are
checked when the file is loaded. Built in: select, trim, pair, histogram, narrate, export.
A user filter is `filter: module:function` or `filter: file.py:function` (beside the file).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netspec.protocol.errors import ProtocolError
from netspec.protocol.names import safe_name

from .condition import check_where, confine
from .narrate import narrate_merged
from .pairs import pair_counts, pair_params, pair_sql
from .usercode import UserCodeError, absolute, load_function, split

if TYPE_CHECKING:
    # The file check imports this module for check_node: the merge's libraries load when a
    # graph runs, over a connection its caller opened.
    import duckdb

TABLES = ("events", "samples", "intervals", "clock", "phases", "rates", "usage", "workload", "states")
_DURATION = re.compile(r"([0-9.]+)(ns|us|ms|s|m)")
_UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000}


class GraphError(ValueError):
    """A node of the graph is wrong: `key` is where, inside analysis.graph."""

    def __init__(self, message: str, *key: str):
        super().__init__(message)
        self.key = key


@dataclass
class Node:
    """What a filter knows of where it runs."""

    name: str
    db: duckdb.DuckDBPyConnection
    out: Path
    origin_ns: int  # the run's first instant
    phases: dict[str, tuple[int, int]] = field(default_factory=dict)  # phase -> global (start, end)
    input: str = ""  # the input's view name, quoted for SQL
    warnings: list[str] = field(default_factory=list)  # what the filter left out, for the merge's warnings

    def instant(self, when: str | float, end: bool = False) -> int:
        """A phase's start (its end if `end`), or a time since the run started ('2s', 500 ms as 0.5)."""
        if when in self.phases:
            return self.phases[when][1 if end else 0]
        return self.origin_ns + duration_ns(when)


def duration_ns(value: str | float) -> int:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return round(value * 1e9)
    m = _DURATION.fullmatch(str(value))
    if not m:
        raise ValueError(f"{value!r} is neither a phase nor a duration (like 2s, 500ms)")
    return round(float(m.group(1)) * _UNIT_NS[m.group(2)])


def _quote(value: Any) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def _time_column(rel: duckdb.DuckDBPyRelation) -> str:
    for column in ("ts", "end_ts", "entered"):
        if column in rel.columns:
            return f'"{column}"'
    raise ValueError(f"the input has no time column (ts, end_ts or entered); it has {', '.join(rel.columns)}")


def _globs(column: str, patterns: str | list[str]) -> str:
    pats = [patterns] if isinstance(patterns, str) else patterns
    return "(" + " OR ".join(f'"{column}" GLOB {_quote(p)}' for p in pats) + ")"


def select(rel: duckdb.DuckDBPyRelation, node: Node, *, entity: str | list[str] | None = None,
           host: str | list[str] | None = None, component: str | list[str] | None = None,
           name: str | list[str] | None = None, kind: str | list[str] | None = None,
           field: str | list[str] | None = None, since: str | float | None = None,
           until: str | float | None = None, where: str | None = None) -> duckdb.DuckDBPyRelation:
    """Rows whose columns match the given globs, within [since, until] (phases or times
    since the run started), and the SQL condition `where` (a condition on a row's columns,
    never a query: `condition.check_where`)."""
    conditions = []
    for column, patterns in (("entity", entity), ("component", component), ("name", name), ("kind", kind),
                             ("field", field), ("host", host)):
        if patterns is None:
            continue
        if column == "host" and "host" not in rel.columns and "end_host" in rel.columns:
            conditions.append(f"({_globs('start_host', patterns)} OR {_globs('end_host', patterns)})")
        elif column not in rel.columns:
            raise ValueError(f"'{column}' is not a column of the input ({', '.join(rel.columns)})")
        else:
            conditions.append(_globs(column, patterns))
    if since is not None:
        conditions.append(f"{_time_column(rel)} >= {node.instant(since)}")
    if until is not None:
        conditions.append(f"{_time_column(rel)} <= {node.instant(until, end=True)}")
    if where:
        conditions.append(f"({check_where(where)})")
    return rel.filter(" AND ".join(conditions)) if conditions else rel


def trim(rel: duckdb.DuckDBPyRelation, node: Node, *, warmup: str | float = 0,
         first: int = 0) -> duckdb.DuckDBPyRelation:
    """Drops a warm-up: what came within `warmup` of the input's first row, then `first` rows."""
    t = _time_column(rel)
    return node.db.sql(f"""SELECT * EXCLUDE (_n) FROM (
        SELECT *, row_number() OVER (ORDER BY {t}) AS _n FROM {node.input}
        WHERE {t} >= (SELECT min({t}) FROM {node.input}) + {duration_ns(warmup)})
        WHERE _n > {int(first)} ORDER BY {t}""")


def pair(rel: duckdb.DuckDBPyRelation, node: Node, *, start: str, end: str,
         start_component: str | None = None, end_component: str | None = None,
         match: str | None = None) -> duckdb.DuckDBPyRelation:
    """Intervals from `start` records to `end` records with the same tag (as analysis: pairs),
    each side only of the given component if one is; every end of a tag, or its `first` or
    `last` (`match`). What it left unmatched is among the merge's warnings."""
    params = pair_params(node.name, start, end, start_component, end_component, match)
    node.warnings += pair_counts(node.db, node.input, params).warnings()
    return node.db.sql(pair_sql(node.input), params=params)


def histogram(rel: duckdb.DuckDBPyRelation, node: Node, *, column: str | None = None, bins: int = 50,
              lo: float | None = None, hi: float | None = None) -> duckdb.DuckDBPyRelation:
    """Counts of `column` (duration_ns or value by default) in equal bins; also plots/<node>.png."""
    import numpy as np
    import pyarrow as pa

    from .plots import plot_histogram  # matplotlib only when a graph asks for a picture

    column = column or next((c for c in ("duration_ns", "value") if c in rel.columns), None)
    if column not in rel.columns:
        raise ValueError(f"no column {column!r} in the input ({', '.join(rel.columns)})")
    host = next((c for c in ("start_host", "host") if c in rel.columns), None)
    columns = f'"{column}"' + (f', "{host}"' if host else "")
    data = rel.select(columns).filter(f'"{column}" IS NOT NULL').fetchnumpy()
    x = data[column].astype(float)
    counts, edges = np.histogram(x, bins=int(bins), range=None if lo is None and hi is None else
                                 (x.min() if lo is None else lo, x.max() if hi is None else hi))
    hosts = data[host].astype(str) if host else np.full(len(x), "")
    by_host = {h: np.histogram(x[hosts == h], bins=edges)[0] for h in sorted(set(hosts))}
    plot_histogram(node.name, column, edges, by_host, node.out / "plots" / f"{node.name}.png")
    table = pa.table({"lo": edges[:-1], "hi": edges[1:], "count": counts})
    return node.db.from_arrow(table)


def narrate(rel: duckdb.DuckDBPyRelation, node: Node) -> None:
    """<node>.txt: the input's records in words (the input has the events table's columns)."""
    with open(node.out / f"{node.name}.txt", "w") as f:
        for line in narrate_merged(node.db, source=node.input):
            f.write(line + "\n")


EXPORT_FORMATS = {"parquet": "(FORMAT parquet)", "csv": "(FORMAT csv, HEADER)", "json": "(FORMAT json)"}


def export(rel: duckdb.DuckDBPyRelation, node: Node, *, format: str = "parquet") -> None:
    """<node>.parquet, .csv or .json: the input as it is."""
    if format not in EXPORT_FORMATS:
        raise ValueError(f"format {format!r}: one of {', '.join(EXPORT_FORMATS)}")
    node.db.execute(f"COPY (SELECT * FROM {node.input}) TO {_quote(node.out / f'{node.name}.{format}')} "
                    f"{EXPORT_FORMATS[format]}")


BUILTIN: dict[str, Callable[..., duckdb.DuckDBPyRelation | None]] = {
    f.__name__: f for f in (select, trim, pair, histogram, narrate, export)}


def find_filter(spec: str, base: Path) -> Callable[..., Any]:
    """A built-in filter by name, or a user's `module:function` / `file.py:function`."""
    if spec in BUILTIN:
        return BUILTIN[spec]
    if ":" not in spec:
        raise GraphError(f"unknown filter '{spec}': built in are {', '.join(BUILTIN)}; a filter of your own "
                         "is module:function or file.py:function", "filter")
    try:
        return load_function(spec, base, "filter")
    except UserCodeError as exc:
        raise GraphError(str(exc), "filter") from exc


def user_filter(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    """A node's filter of the user's own as (its module or file.py, its function); None for
    a built-in filter's name (or a node without a filter)."""
    name = str(spec.get("filter", ""))
    where, function = split(name)
    return (where, function) if where and name not in BUILTIN else None


def parameters(spec: dict[str, Any]) -> dict[str, Any]:
    """What a node gives its filter: everything but `filter` and `input`."""
    return {k: v for k, v in spec.items() if k not in ("filter", "input")}


def check_node(name: str, spec: dict[str, Any], earlier: list[str], base: Path,
               phases: Collection[str]) -> Callable[..., Any]:
    """The node's filter, once its name is one a file may be named (it names the files its
    sinks write), its input exists, its parameters are ones the filter takes, its times are
    phases of the schedule or durations and a select's `where` is a condition."""
    try:
        safe_name(name, "analysis node")
    except ProtocolError as exc:
        raise GraphError(str(exc)) from None
    if spec["input"] not in (*TABLES, *earlier):
        known = ", ".join((*TABLES, *earlier))
        raise GraphError(f"unknown input '{spec['input']}': a merged table or an earlier node ({known})",
                         "input")
    if name in TABLES:
        raise GraphError(f"'{name}' is a merged table's name; call the node something else")
    fn = find_filter(spec["filter"], base)
    params = parameters(spec)
    signature = inspect.signature(fn)
    takes = [p.name for p in list(signature.parameters.values())[2:]]
    try:
        signature.bind(None, None, **params)
    except TypeError as exc:
        unknown = sorted(set(params) - set(takes))
        key = unknown[0] if unknown else "filter"
        wanted = f"; {spec['filter']} takes {', '.join(takes)}" if takes else f"; {spec['filter']} takes none"
        raise GraphError(f"{exc}{wanted}", key) from exc
    for key in ("since", "until", "warmup"):
        if key in params and not (key != "warmup" and params[key] in phases):
            try:
                duration_ns(params[key])
            except ValueError:
                raise GraphError(f"{params[key]!r} is neither a phase of the schedule ({', '.join(phases)}) "
                                 "nor a duration (like 2s, 500ms)", key) from None
    if fn is select and params.get("where") is not None:
        try:
            check_where(params["where"])
        except ValueError as exc:
            raise GraphError(str(exc), "where") from None
    return fn


def run_graph(db: duckdb.DuckDBPyConnection, graph: dict[str, dict[str, Any]], out: Path, base: Path,
              origin_ns: int, phases: dict[str, tuple[int, int]], *, trusted: Collection[str]) -> list[str]:
    """Every node in order; a node that fails is a warning, and the nodes fed by it are skipped.
    A filter of the user's own runs only if it is among `trusted` (as `UserCode.trusted_filters`
    gives them: the user named it); another is a node not run, said. The graph may be a
    received run's: each node is checked again (`check_node`), and `db` reaches no file
    outside `out` from here on (`confine`)."""
    confine(db, out)
    warnings, failed, done = [], set(), []
    for name, spec in graph.items():
        if not (isinstance(spec.get("filter"), str) and isinstance(spec.get("input"), str)):
            failed.add(name)  # the file's schema requires both: a record without them was not written so
            warnings.append(f"analysis node {name!r}: not run: it does not name both a filter and an input")
            continue
        if spec["input"] in failed:
            failed.add(name)
            warnings.append(f"analysis node {name}: skipped, its input {spec['input']} failed")
            continue
        if spec["filter"] not in BUILTIN and absolute(spec["filter"], base) not in trusted:
            failed.add(name)
            warnings.append(f"analysis node {name}: filter {spec['filter']} not run: the run's record names "
                            "it, and a filter of your own runs only when you name it (the experiment file "
                            f"you run, or ns_control fetch --filter {spec['filter']})")
            continue
        node = Node(name, db, out, origin_ns, phases, f'"{spec["input"]}"')
        try:
            fn = check_node(name, spec, done, base, phases)
            result = fn(db.sql(f"SELECT * FROM {node.input}"), node, **parameters(spec))
            if result is not None:
                result.create_view(name, replace=True)
        except Exception as exc:
            failed.add(name)
            warnings.append(f"analysis node {name} ({spec['filter']}): {exc}")
            continue
        warnings += [f"analysis node {name}: {w}" for w in node.warnings]
        done.append(name)
    return warnings
