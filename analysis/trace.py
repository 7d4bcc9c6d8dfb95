"""The merged timeline as a trace for ui.perfetto.dev (Chrome's JSON trace format, which
Perfetto opens as it is): a process per host, a thread per component with its events as
instants, intervals and cross-host pairs as async slices, counters and CAMP rates as counter
tracks, and each host's steps as slices on its own `phases` track. Each pair's two ends are
also marks on a `pairs` track of their hosts, joined by a flow arrow from send to receive.

Times are microseconds from the run's first instant, so a double keeps nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import duckdb
import msgspec

TRACE_LIMIT = 1_000_000  # events and intervals each; more makes a file the viewer cannot open
PHASES_TID = 0
PAIRS_TRACK = "pairs"
MARK_US = 0.001  # a pair's end is a slice this long: a flow arrow binds to a slice, not an instant
NET_RATE = r"^net\.(.+)\.(bytes_recv|bytes_sent)$"


@dataclass
class TraceCounts:
    events: int = 0
    slices: int = 0
    counters: int = 0
    truncated: bool = False


class _Tracks:
    """pid per host, tid per (host, component), and their names as metadata events."""

    def __init__(self, out: IO[bytes]):
        self.out, self.pids, self.tids = out, {}, {}

    def pid(self, host: str) -> int:
        if host not in self.pids:
            self.pids[host] = len(self.pids) + 1
            self._emit("process_name", self.pids[host], PHASES_TID, f"host {host}")
            self._emit("thread_name", self.pids[host], PHASES_TID, "phases")
        return self.pids[host]

    def tid(self, host: str, component: str) -> tuple[int, int]:
        pid = self.pid(host)
        if (host, component) not in self.tids:
            self.tids[host, component] = len(self.tids) + 1
            self._emit("thread_name", pid, self.tids[host, component], component)
        return pid, self.tids[host, component]

    def _emit(self, kind: str, pid: int, tid: int, name: str) -> None:
        write_event(self.out, {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": name}})


_encode = msgspec.json.Encoder().encode


def write_event(out: IO[bytes], event: dict[str, Any]) -> None:
    out.write(b",\n" + _encode(event))


def _flow(out: IO[bytes], tracks: _Tracks, ident: str, name: str, tag: int | None,
          start: tuple[str, float], end: tuple[str, float]) -> None:
    """A pair's ends as marks on their hosts' pairs tracks, and the flow arrow between them."""
    for (host, ts), phase, end_name in ((start, "s", "sent"), (end, "f", "received")):
        pid, tid = tracks.tid(host, PAIRS_TRACK)
        write_event(out, {"ph": "X", "name": f"{name} {end_name}", "pid": pid, "tid": tid, "ts": ts,
                          "dur": MARK_US, "args": {"tag": tag}})
        write_event(out, {"ph": phase, "cat": "pair", "name": name, "id": ident, "pid": pid, "tid": tid,
                          "ts": ts, **({"bp": "e"} if phase == "f" else {})})


def write_trace(db: duckdb.DuckDBPyConnection, path: Path, limit: int = TRACE_LIMIT) -> TraceCounts:
    """trace.json from the views events, intervals, rates and phases."""
    counts = TraceCounts()
    origin = db.execute("SELECT least((SELECT min(ts) FROM events), (SELECT min(entered) FROM phases))"
                        ).fetchone()[0] or 0

    def us(ns: int) -> float:
        return (ns - origin) / 1e3

    with open(path, "wb") as out:
        out.write(b'{"displayTimeUnit":"ns","traceEvents":[\n')
        out.write(_encode({"ph": "M", "name": "netspec", "pid": 0, "args": {"origin_ns": origin}}))
        tracks = _Tracks(out)
        for step, phase, host, start, end in db.execute(
                "SELECT step, phase, host, min(entered), max(acked) FROM phases WHERE entered IS NOT NULL "
                "AND acked IS NOT NULL GROUP BY ALL ORDER BY step, host").fetchall():
            write_event(out, {"ph": "X", "name": phase, "pid": tracks.pid(host), "tid": PHASES_TID,
                              "ts": us(start), "dur": (end - start) / 1e3, "args": {"step": step}})
        rows = db.execute(f"""SELECT ts, host, component, entity, kind, tag, value, data, bound_ns FROM events
                              WHERE kind IN ('event', 'counter', 'admin') LIMIT {limit + 1}""")
        while batch := rows.fetchmany(65536):
            for ts, host, component, entity, kind, tag, value, data, bound in batch:
                counts.events += 1
                if counts.events > limit:
                    counts.truncated = True
                    break
                pid, tid = tracks.tid(host, component)
                if kind == "counter":
                    write_event(out, {"ph": "C", "name": entity, "pid": pid, "ts": us(ts),
                                      "args": {"value": value}})
                    continue
                args = {k: v for k, v in (("tag", tag), ("value", value), ("bound_ns", bound))
                        if v is not None}
                if data is not None:
                    args["data"] = msgspec.json.decode(data)
                write_event(out, {"ph": "i", "s": "t", "name": entity, "pid": pid, "tid": tid, "ts": us(ts),
                                  "args": args})
        counts.events = min(counts.events, limit)
        rows = db.execute(f"""SELECT name, start_host, end_host, tag, start_ts, end_ts, duration_ns, bound_ns,
                                     source FROM intervals ORDER BY end_ts LIMIT {limit}""")
        while batch := rows.fetchmany(65536):
            for n, (name, start_host, end_host, tag, start, end, duration, bound, source) in enumerate(batch):
                # Async slices: intervals of one component may overlap without nesting.
                ident = f"{counts.slices + n:x}"
                common = {"cat": "interval", "name": name, "pid": tracks.pid(end_host), "id": ident}
                write_event(out, {**common, "ph": "b", "ts": us(start),
                                  "args": {"tag": tag, "from": start_host, "duration_ns": duration,
                                           "bound_ns": bound}})
                write_event(out, {**common, "ph": "e", "ts": us(end)})
                if source == "pair":
                    _flow(out, tracks, ident, name, tag, (start_host, us(start)), (end_host, us(end)))
            counts.slices += len(batch)
        counts.truncated |= counts.slices >= limit
        for ts, host, field, rate in db.execute(
                f"""SELECT ts, host, field, rate FROM rates WHERE field = 'cpu.busy_pct'
                    OR regexp_matches(field, '{NET_RATE}') ORDER BY ts""").fetchall():
            counts.counters += 1
            if field == "cpu.busy_pct":
                write_event(out, {"ph": "C", "name": "cpu busy %", "pid": tracks.pid(host), "ts": us(ts),
                                  "args": {"busy": rate}})
            else:
                interface, direction = field.split(".")[1], field.rsplit("_", 1)[1]
                write_event(out, {"ph": "C", "name": f"net {interface} bytes/s", "pid": tracks.pid(host),
                                  "ts": us(ts), "args": {direction: rate}})
        out.write(b"\n]}\n")
    return counts
