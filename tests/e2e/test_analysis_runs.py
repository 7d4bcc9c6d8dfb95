"""Real runs through the merge's analysis: a replication (tests/programs/replication.py) whose
pairs give each backup's latency its own row, and hosts on one kernel said to show the
machine's CPU. (The same analysis over streams written by the test: tests/analysis/.)"""

from __future__ import annotations

import json

import duckdb
import pytest
from support import PROGRAMS, ns_control

pytestmark = pytest.mark.e2e

REPLICATION = """\
experiment: replication
hosts: {p: {}, b1: {}, b2: {}}
components:
  primary: {host: p, program: PROGRAM, args: [--role, primary], params: {count: 200}}
  backup1: {host: b1, program: PROGRAM, args: [--role, backup], params: {apply_us: 0}}
  backup2: {host: b2, program: PROGRAM, args: [--role, backup], params: {apply_us: APPLY_US}}
services:
  clksync: {reference: p}
streams:
  kv: {enable: [KV]}
analysis:
  pairs:
    replicate: {start: KV/replicate, end: KV/applied}
schedule:
  - launch
  - sync_clocks
  - start_logging
  - {phase: listen, components: [backup1, backup2], deadline: 10s}
  - {phase: run, components: [primary], deadline: 60s}
  - stop_logging
  - collect
"""
APPLY_US = 100


def test_a_real_replication_run_gives_each_backup_its_own_latency_the_slower_one_included(tmp_path):
    program = PROGRAMS / "replication.py"
    exp = tmp_path / "replication.yaml"
    exp.write_text(REPLICATION.replace("PROGRAM", str(program)).replace("APPLY_US", str(APPLY_US)))
    done = ns_control("run", str(exp), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    # two backups end each write: 400 ends of 200 starts, said so
    assert ("causality replicate: 400 ends matched (200 starts, 200 of them with several ends), every end "
            "after its start") in done.stdout
    merged = tmp_path / "runs" / "latest" / "merged"
    ends = dict(duckdb.sql(f"""SELECT end_component, list(duration_ns + bound_ns)
                               FROM '{merged}/intervals.parquet' WHERE name = 'replicate'
                               GROUP BY ALL""").fetchall())
    assert sorted(ends) == ["backup1", "backup2"] and all(len(v) == 200 for v in ends.values())
    # backup2 applies each write APPLY_US after it arrives: no latency of its can be shorter.
    assert min(ends["backup2"]) >= APPLY_US * 1000
    (counts,) = json.loads((merged / "summary.json").read_text())["pairs"]
    assert (counts["starts_without_end"], counts["ends_without_start"], counts["rows"]) == (0, 0, 400)


ONE_MACHINE = """\
experiment: one-machine
hosts: {a: {}, b: {}}
components:
  one: {host: a, command: [sleep, "0.3"], start: run}
  two: {host: b, command: [sleep, "0.3"], start: run}
services:
  camp: {interval_ms: 20}
schedule: [launch, start_logging, run, stop_logging, collect]
"""


def test_hosts_on_one_kernel_are_said_to_show_the_machines_cpu_in_the_merge_and_the_report(tmp_path):
    """Two local hosts: two daemons under one kernel, as namespaces or containers would be."""
    (tmp_path / "exp.yaml").write_text(ONE_MACHINE)
    done = ns_control("run", "exp.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    said = ("hosts a, b share one kernel (one boot_id: namespaces or containers of one machine): CAMP's CPU, "
            "memory and disk figures of each are the whole machine's, not the host's own (each component's "
            "own CPU, proc.*, is its own)")
    assert f"warning: {said}" in done.stdout
    summary = json.loads((tmp_path / "runs" / "latest" / "merged" / "summary.json").read_text())
    assert summary["shared_kernel"] == [["a", "b"]] and said in summary["warnings"]
    report = ns_control("report", "latest", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    caveat = "cpu busy a: host a shares one kernel with b: this is the whole machine's CPU, not the host's"
    assert f"    {caveat} own" in report.stdout.splitlines()
