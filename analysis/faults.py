"""The schedule's faults as merged/faults.parquet: each fault's audit from run.json
(protocol/runrecord.py's FaultRecord, its instants placed on the global timeline by the
controller with its host's clock estimate then, +- `bound_ns`), its end, and its recovery
from the programs' operations (operations.parquet, analysis/operations.py). `report`, the
browser and netspec.results read it here.

A fault's end is its own where it has one (a timed partition's or pause's, a pressure's, a
restart's start again), else the fault that undoes it, the first of its kind done after it
on the same host and target: a partition's heal, a pause's resume, a kill's or terminate's
start or restart. Its recovery: the first success of an operation asked (its intended
instant) after the fault was done, and after its end; any program's operation counts, as a
user's client would see the service. An operation asked before the fault and answered after
is not a recovery: it was in flight.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from netspec.protocol.runrecord import FaultRecord, RunRecord

from .units import duration_text

UNDONE_BY = {"partition": ("heal",), "pause": ("resume",), "kill": ("start", "restart"),
             "terminate": ("start", "restart")}
UNDOING = ("heal", "resume", "start")  # each an instant that ends an earlier fault: no end of its own

# faults.parquet's columns, in order (docs/results.md says each).
FAULTS = pa.schema([
    ("index", pa.int32()), ("kind", pa.string()), ("target", pa.string()), ("host", pa.string()),
    ("phase", pa.string()), ("after_s", pa.float64()), ("planned_ts", pa.int64()),
    ("done_ts", pa.int64()), ("late_ns", pa.int64()), ("bound_ns", pa.int64()),
    ("unsynchronised", pa.bool_()), ("effect", pa.string()), ("effect_ts", pa.int64()),
    ("end_ts", pa.int64()), ("ended_by", pa.int32()), ("through_ts", pa.int64()), ("error", pa.string()),
    ("unfinished", pa.bool_()), ("recovered_ts", pa.int64()), ("recovery_ns", pa.int64()),
    ("recovered_after_end_ts", pa.int64()), ("recovery_after_end_ns", pa.int64())])


@dataclass(frozen=True)
class FaultEnd:
    """When a fault ended, and by which fault of the schedule (None: its own end)."""

    at_ns: int
    by: int | None


def fault_end(faults: list[FaultRecord], fault: FaultRecord) -> FaultEnd | None:
    """`fault`'s end (the module's doc says which); None if it has none (a kill nothing
    started again, a partition never healed: to the run's end)."""
    if fault.ended_ns is not None:
        return FaultEnd(fault.ended_ns, None)
    undo = UNDONE_BY.get(fault.kind)
    if undo is None or fault.done_ns is None:
        return None
    after = [f for f in faults if f.kind in undo and (f.host, f.target) == (fault.host, fault.target)
             and f.done_ns is not None and f.done_ns >= fault.done_ns and not f.error]
    first = min(after, key=lambda f: f.done_ns or 0, default=None)
    return FaultEnd(first.done_ns, first.index) if first is not None and first.done_ns is not None else None


def _first_success(db: duckdb.DuckDBPyConnection | None, after_ns: int | None) -> int | None:
    if db is None or after_ns is None:
        return None
    rows = db.execute("SELECT min(end_ts) FROM operations WHERE outcome = 'ok' AND intended_ts >= ?",
                      [after_ns]).fetchall()
    return rows[0][0]


def write_faults(db: duckdb.DuckDBPyConnection, path: Path, record: RunRecord, operations: bool) -> int:
    """merged/faults.parquet from run.json's faults; recovery where the run logged
    `operations`. Returns its rows (no file where the schedule had no fault)."""
    if not record.faults:
        return 0
    ops = db if operations else None
    rows = []
    for fault in record.faults:
        end = fault_end(record.faults, fault)
        end_ns = end.at_ns if end is not None else None
        recovered, after_end = _first_success(ops, fault.done_ns), _first_success(ops, end_ns)
        rows.append({
            "index": fault.index, "kind": fault.kind, "target": fault.target, "host": fault.host,
            "phase": fault.phase, "after_s": fault.after_s, "planned_ts": fault.planned_ns,
            "done_ts": fault.done_ns, "late_ns": fault.late_ns, "bound_ns": fault.bound_ns,
            "unsynchronised": fault.unsynchronised, "effect": fault.effect or None,
            "effect_ts": fault.effect_ns, "end_ts": end_ns, "ended_by": end.by if end is not None else None,
            "through_ts": fault.through_ns,
            "error": fault.error or None, "unfinished": fault.unfinished, "recovered_ts": recovered,
            "recovery_ns": None if recovered is None or fault.done_ns is None else recovered - fault.done_ns,
            "recovered_after_end_ts": after_end,
            "recovery_after_end_ns": None if after_end is None or end_ns is None else after_end - end_ns})
    pq.write_table(pa.Table.from_pylist(rows, schema=FAULTS), path)
    return len(rows)


@dataclass(frozen=True)
class Recovery:
    """A fault's recovery as `report` and netspec.results give it (faults.parquet's row)."""

    index: int
    kind: str
    target: str
    host: str
    recovery_ns: int | None  # from when it was done to the first success asked after it
    end_ns: int | None  # when it ended (global), None if it lasted to the run's end
    ended_by: int | None
    recovery_after_end_ns: int | None

    def text(self) -> str:
        head = f"fault {self.index} {self.kind} {self.target} (host {self.host}): "
        since = (f"first success {duration_text(self.recovery_ns)} after it" if self.recovery_ns is not None
                 else "no success after it")
        if self.kind in UNDOING:
            return head + since
        if self.end_ns is None:
            return head + since + "; it lasted to the run's end"
        by = f" (fault {self.ended_by})" if self.ended_by is not None else ""
        after = (f"{duration_text(self.recovery_after_end_ns)} after its end{by}"
                 if self.recovery_after_end_ns is not None else f"none after its end{by}")
        return f"{head}{since}, {after}"


def recoveries(db: duckdb.DuckDBPyConnection) -> list[Recovery]:
    """Each fault's recovery, in the file's order; none where the result set has no faults
    table or no operations (then there is nothing to recover by)."""
    views = {r[0] for r in db.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if not {"faults", "operations"} <= views:
        return []
    rows = db.execute("""SELECT index, kind, target, host, recovery_ns, end_ts, ended_by,
                                recovery_after_end_ns FROM faults ORDER BY index""").fetchall()
    return [Recovery(*row) for row in rows]


def recovery_lines(db: duckdb.DuckDBPyConnection) -> list[str]:
    """`report`'s block of them: each fault against the operations' first success."""
    said = recoveries(db)
    if not said:
        return []
    return ["recovery (each fault against the first success of an operation asked after it, and after "
            "its end):",
            *(f"  {r.text()}" for r in said)]


def fault_line(said: FaultRecord) -> str:
    """A fault and its audit in a line: the live line's, and `report`'s."""
    when = f"{said.phase or 'run'}+{said.after_s:g}s"
    head = f"fault {said.index} {said.kind} {said.target} (host {said.host}, at {when})"
    if said.done_ns is None:
        return f"{head}: {said.error or 'not done yet'}"
    bound = " (unsynchronised)" if said.unsynchronised else \
        f" +- {_ms(said.bound_ns)}" if said.bound_ns is not None else ""
    late = f"done {_ms(said.late_ns)} after its instant{bound}" if said.late_ns is not None else "done"
    effect = f"; {said.effect}" if said.effect else ""
    after = f", {_ms(said.effect_after_ns)} after it" if said.effect_after_ns is not None else ""
    if said.ended_ns is not None and said.through_ns is not None:
        after += f"; ended, a first packet through {_ms(said.through_ns - said.ended_ns)} after"
    error = f"; {said.error}" if said.error else ""
    lasting = "; the run ended before its effect or its end was reported" if said.unfinished else ""
    return f"{head}: {late}{effect}{after}{error}{lasting}"


def fault_lines(record: RunRecord) -> list[str]:
    """`report`'s section of a run's faults: each planned fault against its observed effect."""
    if not record.faults:
        return []
    return ["faults (each instant against its effect, on its host's clock):",
            *(f"  {fault_line(said)}" for said in record.faults)]


def _ms(ns: int | None) -> str:
    if ns is None:
        return "?"
    return f"{ns / 1e3:.0f} us" if abs(ns) < 1_000_000 else f"{ns / 1e6:.1f} ms"
