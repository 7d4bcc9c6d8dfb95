"""The faults table of a result set: run.json's audit of each fault, its end (its own or
the fault that undoes it) and its recovery against the operations the clients logged."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
from netspec.analysis.faults import FAULTS, recovery_lines
from netspec.analysis.resultset import merge_run, open_tables
from operations_run import MS, PARTITION, partitioned_run

P0 = PARTITION[0]


def with_faults(run, faults) -> None:
    record = json.loads((run / "run.json").read_text())
    record["faults"] = faults
    (run / "run.json").write_text(json.dumps(record))


def test_each_fault_has_a_row_with_its_end_and_its_recovery_from_the_operations(tmp_path):
    run = partitioned_run(tmp_path)
    # c1 partitioned from the server as the partition step starts, healed 300 ms on; a pause
    # of c2's client that nothing resumes; a kill and the start that undoes it
    with_faults(run, [
        {"index": 0, "kind": "partition", "target": "server", "host": "c1", "phase": "partition",
         "planned_ns": P0 - 400_000, "done_ns": P0, "late_ns": 400_000, "bound_ns": 20_000,
         "effect": "toward server: its rule dropped a first packet", "effect_ns": P0 + 2 * MS},
        {"index": 1, "kind": "heal", "target": "server", "host": "c1", "phase": "partition",
         "planned_ns": P0 + 300 * MS, "done_ns": P0 + 300 * MS, "late_ns": 0, "bound_ns": 20_000},
        {"index": 2, "kind": "pause", "target": "client", "host": "c2", "phase": "partition",
         "planned_ns": P0 + 995 * MS, "done_ns": P0 + 995 * MS, "late_ns": 0},
        {"index": 3, "kind": "kill", "target": "client", "host": "c1", "phase": "steady",
         "planned_ns": P0 - 500 * MS, "done_ns": P0 - 500 * MS, "late_ns": 0},
        {"index": 4, "kind": "start", "target": "client", "host": "c1", "phase": "steady",
         "planned_ns": P0 - 400 * MS, "done_ns": P0 - 400 * MS, "late_ns": 0, "error": "",
         "effect_ns": P0 - 398 * MS}])
    result = merge_run(run)
    assert result.faults == 5 and "faults.parquet" in result.files
    table = pq.read_table(run / "merged" / "faults.parquet")
    assert table.schema.names == FAULTS.names
    rows = {r["index"]: r for r in table.to_pylist()}
    partition, heal, pause, kill = rows[0], rows[1], rows[2], rows[3]
    assert (partition["done_ts"], partition["late_ns"], partition["bound_ns"]) == (P0, 400_000, 20_000)
    assert partition["effect_ts"] == P0 + 2 * MS and partition["end_ts"] == P0 + 300 * MS
    assert partition["ended_by"] == 1
    # c1 timed out on everything it asked in the first 300 ms; c2 failed at P0, then its next
    # (P0 + 10 ms) answered in 1 ms: the first success after the partition
    assert partition["recovery_ns"] == 11 * MS
    assert partition["recovered_ts"] == P0 + 11 * MS
    # after the heal: c1's first (P0 + 300 ms, 1 ms), c2's at that instant having failed
    assert partition["recovery_after_end_ns"] == 1 * MS
    assert heal["end_ts"] is None and heal["recovery_ns"] == 1 * MS
    # nothing asked after the pause succeeded before the run's end; and nothing undid it
    assert (pause["end_ts"], pause["recovery_ns"], pause["recovered_after_end_ts"]) == (None, None, None)
    assert (kill["end_ts"], kill["ended_by"]) == (P0 - 400 * MS, 4)
    with open_tables(run / "merged") as db:
        lines = recovery_lines(db)
    assert lines[1] == "  fault 0 partition c1 | server: first success 11 ms after it, " \
                       "1 ms after its end (fault 1)"
    assert lines[2] == "  fault 1 heal c1 | server: first success 1 ms after it"
    assert lines[3] == "  fault 2 pause client (host c2): no success after it; it lasted to the run's end"


def test_a_run_without_faults_has_no_faults_table(tmp_path):
    run = partitioned_run(tmp_path)
    assert merge_run(run).faults == 0 and not (run / "merged" / "faults.parquet").exists()
    with open_tables(run / "merged") as db:
        assert recovery_lines(db) == []


def test_faults_without_operations_say_their_recovery_was_not_measured(tmp_path):
    run = partitioned_run(tmp_path)
    for ops in (run / "hosts").glob("*/streams/*"):
        ops.unlink()  # no client's records: no operations
    with_faults(run, [{"index": 0, "kind": "pause", "target": "client", "host": "c2", "done_ns": P0}])
    merge_run(run)
    with open_tables(run / "merged") as db:
        assert recovery_lines(db) == ["recovery: not measured, the run logged no operations "
                                      "(nodelib.operation) to recover by"]
