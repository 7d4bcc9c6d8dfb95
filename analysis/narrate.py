"""Narration sinks: records as lines a person reads, from stream files (`ns_control dump`)
or from the merged timeline (merged/narration.txt)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netspec.datastream.reader import Record, StreamReader

if TYPE_CHECKING:
    import duckdb  # only its types: the connection is the caller's

MAX_BINS_SHOWN = 8


def clock_text(ts: int) -> str:
    """UTC time of day to the nanosecond: 19:02:48.123456789."""
    return time.strftime("%H:%M:%S", time.gmtime(ts // 1_000_000_000)) + f".{ts % 1_000_000_000:09d}"


def header_lines(reader: StreamReader) -> list[str]:
    """What a file's header says (schema.Header: what it leaves out reads "?")."""
    h = reader.header
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(h.created_ns // 10**9))
    version = ".".join(str(v) for v in h.version)
    mode = f"ring of {h.ring_chunks} chunks" if h.ring else "normal"
    parent = f", forked from {h.parent_pid}" if h.parent_pid else ""
    return [f"{reader.path.name}: stream '{h.stream}' of {h.component or 'a process'} "
            f"(pid {h.pid or '?'}{parent}) on host {h.host or '?'}, run {h.run or '?'}",
            f"  format {version}, {h.clock or 'clock ?'}, {mode}, created {when}"]


def record_line(r: Record, with_source: bool = False) -> str:
    who = ""
    if with_source:
        h = r.source.header
        where = f"{h.host or '?'}/{h.component or h.pid or '?'}"
        who = f"{where:<16} "
    what = describe(r.entity.kind, r.entity.name, r.tag, r.value, r.start, r.entity.spec)
    return f"{clock_text(r.ts)}  {who}{r.entity.full_name:<24} {what}".rstrip()


def describe(kind: str, name: str, tag: int | None, v: Any, start: int | None,
             spec: dict[str, Any] | None = None) -> str:
    """A record's value in words; a histogram's bins need its entity's spec."""
    if kind == "event":
        return f"tag {tag}" + ("" if v is None else f"  {v!r}")
    if kind == "interval":
        return f"tag {tag}  {v / 1e3:.3f} us  (from {clock_text(start or 0)})"
    if kind == "counter":
        return f"= {v}"
    if kind == "histogram":
        return _histogram(spec, v["counts"], v["sum"]) if spec else f"sum {v['sum']}  counts {v['counts']}"
    if kind == "samples":
        return "  ".join(f"{k}={x}" for k, x in v.items())
    if kind == "admin" and isinstance(v, dict):
        return _admin(name, v)
    return "" if v is None else json.dumps(v, default=repr)  # a record of an unknown kind: as it is


def _histogram(spec: dict[str, Any], counts: list[int], total: float) -> str:
    n = sum(counts)
    lo, hi, buckets = spec["lo"], spec["hi"], spec["buckets"]
    width = (hi - lo) / buckets
    mean = f"mean {total / n:g}" if n else "empty"
    bins = [(count, i) for i, count in enumerate(counts[1:-1]) if count]
    shown = sorted(sorted(bins, reverse=True)[:MAX_BINS_SHOWN], key=lambda b: b[1])
    text = " ".join(f"[{lo + i * width:g},{lo + (i + 1) * width:g}):{c}" for c, i in shown)
    more = f" (+{len(bins) - len(shown)} bins)" if len(bins) > len(shown) else ""
    return f"n {n}  {mean}  below {counts[0]}  above {counts[-1]}  {text}{more}".rstrip()


def _admin(name: str, v: dict[str, Any]) -> str:
    if name == "close":
        unwritten = v["unwritten_ring_chunks"]
        ring = f", {unwritten} ring chunks never triggered" if unwritten else ""
        return f"clean close: {v['records']} records in {v['chunks']} chunks{ring}"
    if name == "trigger":
        return (f"ring triggered by {v['reason']}: {v['chunks']} chunks written, "
                f"{v['discarded_chunks']} older ones overwritten")
    if name == "dropped":
        return f"WRITER DROPPED {v['records']} records: {v['reason']}"
    count = "an unknown number of" if v["records"] is None else v["records"]
    return f"LOST {count} records: {v['reason']}"


def narrate(readers: list[StreamReader], records: Iterable[Record]) -> Iterator[str]:
    """Header lines of every file, then one line per record (naming its component when
    there are several files)."""
    for reader in readers:
        yield from header_lines(reader)
    many = len(readers) > 1
    for r in records:
        yield record_line(r, many)


NARRATION_LIMIT = 1_000_000  # lines; the Parquet tables hold everything


def narrate_merged(db: duckdb.DuckDBPyConnection, limit: int = NARRATION_LIMIT,
                   source: str = "events") -> Iterator[str]:
    """The view `source` (events, or a selection of it) on the global timeline: time, error
    bound, where, what."""
    # An integer is exact in value_int (a selection made before it existed may lack it).
    columns = {d[0] for d in db.execute(f"SELECT * FROM {source} LIMIT 0").description}
    exact = "value_int" if "value_int" in columns else "NULL"
    rows = db.execute(f"SELECT ts, bound_ns, host || '/' || component, entity, kind, tag, value, {exact}, "
                      f"start, data FROM {source} LIMIT {limit + 1}")
    n = 0
    while batch := rows.fetchmany(65536):
        for ts, bound, who, entity, kind, tag, value, value_int, start, data in batch:
            n += 1
            if n > limit:
                yield f"... more records than the {limit} narrated: query events.parquet for the rest"
                return
            pm = "        ?" if bound is None else f"{bound / 1e3:>9.1f}"
            v = json.loads(data) if data is not None else _number(value) if value_int is None else value_int
            what = describe(kind, entity.partition("/")[2], tag, v, start)
            yield f"{clock_text(ts)} \u00b1{pm} us  {who:<20} {entity:<24} {what}"


def _number(value: float | None) -> float | int | None:
    """A value as it was logged, from its double (where value_int holds none)."""
    return int(value) if value is not None and value.is_integer() else value


def write_narration(db: duckdb.DuckDBPyConnection, path: Path) -> None:
    with open(path, "w") as f:
        for line in narrate_merged(db):
            f.write(line + "\n")
