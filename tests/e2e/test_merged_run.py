"""A real run through the merge: integers a program logs as event data come back exact, and
a stream without a clean close is said in the merge's warnings, on its output and in
merged/summary.json."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from support import PROGRAMS, ns_control

pytestmark = pytest.mark.e2e

STAMPS = """\
experiment: stamps
hosts: {a: {}}
components:
  stamper: {host: a, program: STAMPER, params: {count: 200}}
schedule:
  - launch
  - start_logging
  - work
  - collect
streams: {now: {enable: [NOW]}}
"""


Experiment = Callable[[str], Path]


def stamped_run(experiment: Experiment, where: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A run of stamper.py (tests/datastream): 200 time_ns() stamps, and a forked child's
    stream left without a clean close."""
    path = experiment(STAMPS.replace("STAMPER", str(PROGRAMS / "stamper.py")))
    done = ns_control("run", str(path), cwd=where)
    assert done.returncode == 0, done.stdout + done.stderr
    return where / "runs" / "latest", done


def test_time_ns_logged_as_event_data_comes_back_exact_from_the_merge(experiment: Experiment,
                                                                      tmp_path: Path) -> None:
    run, _ = stamped_run(experiment, tmp_path)
    logged = [int(v) for v in next(run.glob("hosts/a/**/stamps.txt")).read_text().split()]
    assert len(logged) == 200 and any(v % 256 for v in logged)  # a double would round these
    events = str(run / "merged" / "events.parquet")
    got = duckdb.sql(f"SELECT value_int, value FROM '{events}' WHERE entity = 'NOW/stamp' AND tag >= 0 "
                     "ORDER BY tag").fetchall()
    assert [v for v, _ in got] == logged
    assert all(d == float(v) for v, d in got)  # the double beside it, as before
    narration = (run / "merged" / "narration.txt").read_text()
    assert all(f"tag {i}  {v}\n" in narration for i, v in enumerate(logged))


def test_the_merge_says_which_stream_has_no_clean_close(experiment: Experiment, tmp_path: Path) -> None:
    run, done = stamped_run(experiment, tmp_path)
    said = "no clean close record: the writer was killed or is still running"
    summary = json.loads((run / "merged" / "summary.json").read_text())
    unclosed = [w for w in summary["warnings"] if said in w]
    assert len(unclosed) == 1 and "/streams/now.stamper." in unclosed[0], summary["warnings"]
    assert said in done.stdout + done.stderr
