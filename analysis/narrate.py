"""Narration sink: records as lines a person reads (`ns_control dump`)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from .read import Record, StreamReader

MAX_BINS_SHOWN = 8


def clock_text(ts: int) -> str:
    """UTC time of day to the nanosecond: 19:02:48.123456789."""
    return time.strftime("%H:%M:%S", time.gmtime(ts // 1_000_000_000)) + f".{ts % 1_000_000_000:09d}"


def header_lines(reader: StreamReader) -> list[str]:
    h = reader.header
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(h.get("created_ns", 0) // 10**9))
    version = ".".join(str(v) for v in h.get("version", ()))
    mode = f"ring of {h.get('ring_chunks')} chunks" if h.get("mode") == "ring" else "normal"
    parent = f", forked from {h['parent_pid']}" if h.get("parent_pid") else ""
    return [f"{reader.path.name}: stream '{h.get('stream')}' of {h.get('component') or 'a process'} "
            f"(pid {h.get('pid')}{parent}) on host {h.get('host') or '?'}, run {h.get('run') or '?'}",
            f"  format {version}, {h.get('clock')}, {mode}, created {when}"]


def record_line(r: Record, with_source: bool = False) -> str:
    who = f"{r.source.host}/{r.source.component or r.source.pid}" if with_source else ""
    who = f"{who:<16} " if who else ""
    return f"{clock_text(r.ts)}  {who}{r.entity.full_name:<24} {_describe(r)}".rstrip()


def _describe(r: Record) -> str:
    kind, v = r.entity.kind, r.value
    if kind == "event":
        return f"tag {r.tag}" + ("" if v is None else f"  {v!r}")
    if kind == "interval":
        return f"tag {r.tag}  {v / 1e3:.3f} us  (from {clock_text(r.start or 0)})"
    if kind == "counter":
        return f"= {v}"
    if kind == "histogram":
        return _histogram(r.entity.spec, v["counts"], v["sum"])
    if kind == "samples":
        return "  ".join(f"{k}={x}" for k, x in v.items())
    return _admin(r.entity.name, v)


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
