"""The schedule's faults as merged/faults.parquet: each fault's audit from run.json
(protocol/runrecord.py's FaultRecord, its instants placed on the global timeline by the
controller with its host's clock estimate then, +- `bound_ns`), its end, and its recovery
from the programs' operations (operations.parquet, analysis/operations.py). `report`, the
browser and netspec.results read it here.

A fault's end is analysis/faultaudit.py's `fault_end`. Its recovery: the first success of an
operation asked (its intended instant) after the fault was done, and after its end; any
program's operation counts, as a user's client would see the service. An operation asked
before the fault and answered after is not a recovery: it was in flight.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from netspec.protocol.kinds import LINK_FAULTS
from netspec.protocol.runrecord import RunRecord

from .faultaudit import UNDOING, fault_end
from .units import duration_text

# faults.parquet's columns, in order (docs/results.md says each).
FAULTS = pa.schema([
    ("index", pa.int32()), ("kind", pa.string()), ("target", pa.string()), ("host", pa.string()),
    ("directions", pa.int32()), ("role", pa.string()), ("holder", pa.string()), ("claimed_ts", pa.int64()),
    ("phase", pa.string()), ("after_s", pa.float64()), ("planned_ts", pa.int64()),
    ("done_ts", pa.int64()), ("late_ns", pa.int64()), ("bound_ns", pa.int64()),
    ("unsynchronised", pa.bool_()), ("effect", pa.string()), ("effect_ts", pa.int64()),
    ("end_ts", pa.int64()), ("ended_by", pa.int32()), ("through_ts", pa.int64()), ("error", pa.string()),
    ("unfinished", pa.bool_()), ("recovered_ts", pa.int64()), ("recovery_ns", pa.int64()),
    ("recovered_after_end_ts", pa.int64()), ("recovery_after_end_ns", pa.int64())])


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
            "directions": len(fault.parts) or None, "role": fault.role, "holder": fault.holder,
            "claimed_ts": fault.claimed_ns,
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
        """`report`'s line: the fault, then `figures`."""
        what = f"{self.host} | {self.target}" if self.kind in LINK_FAULTS else \
            f"{self.target} (host {self.host})"
        return f"fault {self.index} {self.kind} {what}: {self.figures()}"

    def figures(self) -> str:
        """Its recovery in words, after it and after its end (the browser's table cell)."""
        since = (f"first success {duration_text(self.recovery_ns)} after it" if self.recovery_ns is not None
                 else "no success after it")
        if self.kind in UNDOING:
            return since
        if self.end_ns is None:
            return since + "; it lasted to the run's end"
        by = f" (fault {self.ended_by})" if self.ended_by is not None else ""
        after = (f"{duration_text(self.recovery_after_end_ns)} after its end{by}"
                 if self.recovery_after_end_ns is not None else f"none after its end{by}")
        return f"{since}, {after}"


def _tables(db: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in db.execute("SELECT table_name FROM information_schema.tables").fetchall()}


def recoveries(db: duckdb.DuckDBPyConnection) -> list[Recovery]:
    """Each fault's recovery, in the file's order; none where the result set has no faults
    table or no operations (then there is nothing to recover by)."""
    if not {"faults", "operations"} <= _tables(db):
        return []
    rows = db.execute("""SELECT index, kind, target, host, recovery_ns, end_ts, ended_by,
                                recovery_after_end_ns FROM faults ORDER BY index""").fetchall()
    return [Recovery(*row) for row in rows]


def recovery_lines(db: duckdb.DuckDBPyConnection) -> list[str]:
    """`report`'s block of them: each fault against the operations' first success."""
    said = recoveries(db)
    if not said:
        return ["recovery: not measured, the run logged no operations (nodelib.operation) to recover "
                "by"] if "faults" in _tables(db) else []
    return ["recovery (each fault against the first success of an operation asked after it, and after "
            "its end):",
            *(f"  {r.text()}" for r in said)]
