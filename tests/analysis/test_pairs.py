"""Pairs over real streams merged: a primary that replicates each write to two backups, one
slower, gives each backup's latency its own row (match: all), or one end a tag (first, last);
what is left unmatched is counted in summary.json and said in the merge's warnings. (The same
in a real run: tests/e2e/test_analysis_runs.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from netspec.analysis.graph import run_graph
from netspec.analysis.phases import run_phase_lines
from netspec.analysis.resultset import merge_run, open_tables
from support import write_stream

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
# The backups' latencies, ns after the primary's send of each tag.
LATENCY = {"backup1": 50_000, "backup2": 140_000}
WRITES = 100
LOST_AT_BACKUP2 = range(90, 100)  # backup2 never got these: starts with one end only
STRAYS = range(1000, 1005)  # backup1 logs tags the primary never sent: ends without a start


def replicated_run(tmp_path: Path, pairs: dict[str, dict],
                   groups: dict[str, list[str]] | None = None) -> Path:
    """A run directory: host p's primary sends WRITES writes, hosts b1 and b2's backups apply
    them after their LATENCY (all on one clock: each host's own, no fit)."""
    run = tmp_path / "run"
    sends = [("replicate", T0 + i * MS, i) for i in range(WRITES)]
    write_stream(run / "hosts" / "p" / "streams", "p", "primary", sends)
    applied1 = [("applied", T0 + i * MS + LATENCY["backup1"], i) for i in range(WRITES)]
    applied1 += [("applied", T0 + WRITES * MS + k, tag) for k, tag in enumerate(STRAYS)]
    write_stream(run / "hosts" / "b1" / "streams", "b1", "backup1", applied1)
    applied2 = [("applied", T0 + i * MS + LATENCY["backup2"], i) for i in range(WRITES)
                if i not in LOST_AT_BACKUP2]
    write_stream(run / "hosts" / "b2" / "streams", "b2", "backup2", applied2)
    (run / "run.json").write_text(json.dumps({
        "format": 1, "id": "r", "experiment": "replication", "status": "ok",
        "plan": {"source": str(tmp_path / "exp.yaml"), "analysis": {"pairs": pairs},
                 "component_groups": groups or {}},
        "hosts": {}, "steps": []}))
    return run


def test_every_backups_end_of_a_replicated_write_is_its_own_row_and_the_unmatched_are_counted(tmp_path):
    run = replicated_run(tmp_path, {"replication": {"start": "KV/replicate", "end": "KV/applied"}})
    result = merge_run(run)
    rows = duckdb.sql(f"""SELECT end_host, end_component, count(*), min(duration_ns), max(duration_ns)
                          FROM '{run}/merged/intervals.parquet' WHERE name = 'replication'
                          GROUP BY ALL ORDER BY end_host""").fetchall()
    assert rows == [("b1", "backup1", WRITES, LATENCY["backup1"], LATENCY["backup1"]),
                    ("b2", "backup2", WRITES - len(LOST_AT_BACKUP2), LATENCY["backup2"], LATENCY["backup2"])]
    (counts,) = json.loads((run / "merged" / "summary.json").read_text())["pairs"]
    assert counts == {"pair": "replication", "match": "all", "starts": WRITES, "start_tags": WRITES,
                      "starts_without_end": 0, "ends": 2 * WRITES - len(LOST_AT_BACKUP2) + len(STRAYS),
                      "ends_without_start": len(STRAYS), "matched_tags": WRITES, "untagged": 0,
                      "tags_with_several_ends": WRITES - len(LOST_AT_BACKUP2), "repeated_ends": 0,
                      "rows": 2 * WRITES - len(LOST_AT_BACKUP2), "ends_left_out": 0,
                      "start_component": None, "end_component": None}
    # Each backup ends a write once: several ends a start, as replication means, and no warning of it.
    assert "pair replication: 5 of 195 ends had no start" in result.warnings
    (causality,) = result.causality
    assert causality.text() == ("replication: 190 ends matched (100 starts, 90 of them with several ends), "
                                "every end after its start")


@pytest.mark.parametrize(("match", "backup", "latency"), [("first", "backup1", LATENCY["backup1"]),
                                                           ("last", "backup2", LATENCY["backup2"])])
def test_a_pair_matching_one_end_a_tag_keeps_the_first_or_the_last_and_says_how_many_it_left_out(
        tmp_path, match, backup, latency):
    pair = {"start": "KV/replicate", "end": "KV/applied", "match": match}
    run = replicated_run(tmp_path, {"replication": pair})
    result = merge_run(run)
    rows = duckdb.sql(f"""SELECT end_component, count(*), max(duration_ns)
                          FROM '{run}/merged/intervals.parquet'
                          WHERE name = 'replication' AND tag NOT IN {tuple(LOST_AT_BACKUP2)}
                          GROUP BY ALL""").fetchall()
    assert rows == [(backup, WRITES - len(LOST_AT_BACKUP2), latency)]
    assert ("pair replication: 5 of 195 ends had no start; 90 ends of a matched tag left out by "
            f"match: {match}") in result.warnings


def test_a_start_no_end_carries_is_counted_and_said(tmp_path):
    run = replicated_run(tmp_path, {"to_b2": {"start": "KV/replicate", "end": "KV/applied",
                                              "end_component": "backup2"}})
    result = merge_run(run)
    (counts,) = json.loads((run / "merged" / "summary.json").read_text())["pairs"]
    assert (counts["starts_without_end"], counts["ends_without_start"], counts["rows"]) == (10, 0, 90)
    assert (counts["start_component"], counts["end_component"]) == (None, "backup2")
    assert "pair to_b2 (counting only end_component: backup2): 10 of 100 starts had no end" in result.warnings


def test_a_pair_a_component_filter_empties_says_the_filter_beside_the_names(tmp_path):
    run = replicated_run(tmp_path, {"wrong_side": {"start": "KV/replicate", "end": "KV/applied",
                                                   "start_component": "backup1"}})
    result = merge_run(run)
    said = ("pair wrong_side matched nothing: no KV/replicate was followed by its KV/applied "
            "(counting only start_component: backup1)")
    assert any(w.startswith(said) for w in result.warnings), result.warnings


def test_the_graphs_pair_filter_matches_every_end_too_and_says_what_it_left_unmatched(tmp_path):
    run = replicated_run(tmp_path, {})
    merge_run(run)
    db = open_tables(run / "merged")
    graph = {"legs": {"filter": "pair", "input": "events", "start": "KV/replicate", "end": "KV/applied"}}
    assert run_graph(db, graph, run / "merged", tmp_path, T0, {}, trusted=()) == [
        "analysis node legs: pair legs: 5 of 195 ends had no start"]
    assert db.execute("SELECT count(*) FROM legs").fetchone() == (2 * WRITES - len(LOST_AT_BACKUP2),)


def test_a_pair_s_component_filter_naming_a_group_component_counts_each_of_its_components(tmp_path):
    pair = {"start": "KV/replicate", "end": "KV/applied", "end_component": "backup"}
    run = replicated_run(tmp_path, {"to_backups": pair}, {"backup": ["backup1", "backup2"]})
    merge_run(run)
    rows = duckdb.sql(f"""SELECT end_component, count(*) FROM '{run}/merged/intervals.parquet'
                          WHERE name = 'to_backups' GROUP BY ALL ORDER BY 1""").fetchall()
    assert rows == [("backup1", WRITES), ("backup2", WRITES - len(LOST_AT_BACKUP2))]


def test_ends_one_component_logs_twice_a_start_are_no_clean_match_in_the_merge_nor_in_the_report(tmp_path):
    # A server that logs each message's end twice (read in two parts): 2 ends a start.
    run = tmp_path / "run"
    write_stream(run / "hosts" / "c" / "streams", "c", "client",
                 [("send", T0 + i * MS, i) for i in range(WRITES)])
    write_stream(run / "hosts" / "s" / "streams", "s", "server",
                 [("received", T0 + i * MS + k * 1000 + 5000, i) for i in range(WRITES) for k in (0, 1)])
    acks = {"status": "ok", "entered_ns": T0 - MS, "acked_ns": T0 + (WRITES + 1) * MS}
    (run / "run.json").write_text(json.dumps({
        "format": 1, "id": "r", "experiment": "echo", "status": "ok",
        "plan": {"source": str(tmp_path / "exp.yaml"),
                 "analysis": {"pairs": {"one_way": {"start": "KV/send", "end": "KV/received"}}}},
        "hosts": {}, "steps": [{"phase": "run", "status": "ok",
                                "hosts": {"c": {"components": {"client": acks}}}}]}))
    result = merge_run(run)
    (causality,) = result.causality
    assert causality.text() == ("one_way: 200 ends matched (100 starts, 100 of them with several ends), "
                                "every end after its start")
    assert ("pair one_way: 100 of 100 matched starts have several ends from one component, a row each "
            "(200 rows; `match: first` or `last` keeps one end a start)") in result.warnings
    (line,) = [line for line in run_phase_lines(run / "merged", "r") if "one_way" in line]
    assert line.startswith("      one_way: 200 values (ends of 100 starts: several ends a start), p50 ")
