"""netspec.results: runs and campaigns opened from Python; the demo run from Python, its
latency read back through the API and checked against the Parquet and `ns_control show`."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import textwrap

import pyarrow.parquet as pq
import pytest
from netspec import experiment, results
from netspec.protocol.errors import NetspecError
from netspec.protocol.exits import run_processes
from support import PROGRAMS, REPO, ns_control, session_dir

DEMO = REPO / "experiments" / "stimulus_response" / "stimulus_response.yaml"
STORED = REPO / "tests" / "data" / "runs" / "stimulus-response" / "20261121T181343Z-23d1a4"
COUNT = 300  # the demo's client.count, overridden from Python (the file says 2000)


@pytest.fixture(scope="module")
def demo():
    """The demo run from Python as `ns_control demo` runs it (two local daemons), with one
    param overridden, once for the tests of this module; its runs directory removed after."""
    where = session_dir() / f"api-demo-{os.getpid()}"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("NETSPEC_HOME", str(where / "home"))
        run = experiment.run(DEMO, {"client.count": COUNT}, runs=where / "runs")
    yield run
    shutil.rmtree(where, ignore_errors=True)


def test_the_public_surface_is_pinned_and_every_name_says_what_it_is():
    assert sorted(results.__all__) == ["Campaign", "CampaignRecord", "CampaignRun", "Entry",
                                       "MergedHistogram", "NetspecError", "OperationFigures", "Outcome",
                                       "Participant", "Point", "Recovery", "Run", "RunError", "RunOutcome",
                                       "RunRecord", "RunStatus", "Split", "Step", "Tables", "decide",
                                       "open_campaign", "open_run"]
    assert [n for n in results.__all__ if not (getattr(results, n).__doc__ or "").strip()] == []


@pytest.mark.e2e
def test_the_demo_run_from_python_reads_its_latency_back_through_the_api(demo):
    run = results.open_run(demo.id, runs=demo.path.parent.parent)
    assert run.path == demo.path and run.record == demo.record
    assert (run.outcome, run.outcome.exit_code) == (results.RunOutcome("ok"), 0)
    assert [s.phase for s in run.steps] == ["launch", "sync_clocks", "start_logging", "listen", "run",
                                            "stop_logging", "collect"]
    assert [(p.host, p.component, p.returncode) for p in run.participants] == [("a", "server", 0),
                                                                              ("b", "client", 0)]
    ((host, name, client),) = run.steps[4].participants()
    assert (host, name, client.status) == ("b", "client", "ok")
    assert client.message.startswith(f"{COUNT} round trips: median")
    with run.tables() as tables:
        assert {"events", "intervals", "samples", "clock", "phases"} <= set(tables.names)
        count, median = tables.sql("SELECT count(*), median(duration_ns) FROM intervals "
                                   "WHERE name = 'STIM/rtt'").fetchall()[0]
        arrow = tables.arrow("intervals")
    parquet = pq.read_table(run.path / "merged" / "intervals.parquet").to_pylist()
    rtts = [r["duration_ns"] for r in parquet if r["name"] == "STIM/rtt"]
    assert (count, median) == (COUNT, statistics.median(rtts))
    assert arrow.to_pylist() == parquet
    shown = ns_control("show", run.id, "--runs", str(run.path.parent.parent), cwd=run.path)
    assert f"b/client: {client.message}" in shown.stdout
    assert f"count: {COUNT}" in (run.path / "experiment.yaml").read_text()  # what `rerun` runs again


@pytest.mark.e2e
def test_the_demo_run_from_python_keeps_its_directory_private_and_leaves_no_process(demo):
    assert [oct(p.stat().st_mode & 0o777) for p in (demo.path, demo.path / "run.json")] == ["0o700", "0o600"]
    assert not run_processes(demo.id)


@pytest.mark.e2e
def test_a_table_the_result_set_lacks_is_named_with_those_it_has_and_frames_need_their_library(demo):
    with demo.tables() as tables:
        with pytest.raises(NetspecError, match=r"no table 'interval' \(it has: clock, events, "):
            tables.arrow("interval")
        for library in ("pandas", "polars"):
            try:
                __import__(library)
            except ImportError:
                with pytest.raises(NetspecError, match=f"{library} is not installed"):
                    getattr(tables, library)("phases")
            else:
                assert len(getattr(tables, library)("phases")) == tables.arrow("phases").num_rows


def test_a_stored_run_gives_its_outcome_steps_and_participants():
    run = results.open_run(STORED)
    assert (run.id, run.experiment, run.outcome.ok) == ("20261121T181343Z-23d1a4", "stimulus-response", True)
    assert isinstance(run.record, results.RunRecord) and run.record.hosts["b"].clock.bound_ns == 812
    step = run.steps[4]
    assert (step.phase, step.status, step.duration_s) == ("run", "ok", 0.134768221)
    assert [(h, c, e.status, e.message) for h, c, e in step.participants()] == [
        ("b", "client", "ok", "2000 round trips: median 65.2 us, p99 102.6 us")]
    assert [results.decide(e) for s in run.steps for _, _, e in s.participants()] == \
        [results.Outcome.OK] * sum(len(s.participants()) for s in run.steps)
    assert run.outcome.status == results.RunStatus.OK
    assert run.participants[1] == results.Participant("b", "client", 0, 0.260923234)


def test_a_run_never_merged_has_no_tables_and_says_how_to_merge_it():
    with pytest.raises(NetspecError, match="run 20261121T181343Z-23d1a4 has no result set: it was not "
                                           "merged; `ns_control fetch 20261121T181343Z-23d1a4` merges it"):
        results.open_run(STORED).tables()


def test_opening_a_run_that_does_not_exist_names_it_and_where_it_was_looked_for(tmp_path):
    with pytest.raises(NetspecError, match=f"^no run 'nosuchrun' under {tmp_path}$"):
        results.open_run("nosuchrun", runs=tmp_path)
    with pytest.raises(NetspecError, match=f"^{tmp_path}: not a run directory \\(no run.json in it\\)$"):
        results.open_run(tmp_path)
    with pytest.raises(NetspecError, match=f"^no campaign\\(s\\) 'nosuch' under {tmp_path / 'campaigns'}$"):
        results.open_campaign("nosuch", runs=tmp_path)
    with pytest.raises(NetspecError, match=f"^{tmp_path}: not a campaign directory"):
        results.open_campaign(tmp_path)


SWEPT = """\
experiment: api-sweep
hosts: {a: {}}
components:
  one: {host: a, program: ACTOR, args: ["launch,collect"], params: {lines: 0}}
schedule: [launch, collect]
sweep: {params: {one.lines: [1, 2]}}
"""


@pytest.mark.e2e
def test_a_campaign_gives_its_points_and_their_runs(tmp_path):
    (tmp_path / "sweep.yaml").write_text(textwrap.dedent(SWEPT).replace("ACTOR", str(PROGRAMS / "actor.py")))
    done = ns_control("run", "sweep.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (checkpoint,) = (tmp_path / "runs" / "campaigns").glob("*/*/campaign.json")
    state = json.loads(checkpoint.read_text())
    campaign = results.open_campaign(state["id"], runs=tmp_path / "runs")
    assert (campaign.path, campaign.experiment, campaign.status) == (checkpoint.parent, "api-sweep", "done")
    assert isinstance(campaign.record, results.CampaignRecord)
    assert [(p.params, p.done, len(p.runs)) for p in campaign.points] == [
        ({"one.lines": 1}, "runs", 1), ({"one.lines": 2}, "runs", 1)]
    runs = campaign.runs()
    assert [r.id for r in runs] == [r["id"] for p in state["points"] for r in p["runs"]]
    assert [r.outcome.status for r in runs] == ["ok", "ok"]
    assert results.open_campaign(checkpoint.parent).points == campaign.points


def test_a_run_opened_while_running_whose_controller_is_then_killed_has_no_tables_as_interrupted(tmp_path):
    controller = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from netspec.controller.record.rundir import RunDir; "
         f"print(RunDir.create(Path({str(tmp_path)!r}), 'killed', 'x: 1\\n').path, flush=True); "
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        run = results.open_run(controller.stdout.readline().strip())
        assert run.outcome.status == "running"
    finally:
        controller.kill()
        controller.wait(timeout=10)
    assert run.outcome.status == "interrupted"
    with pytest.raises(NetspecError, match="has no result set") as said:
        run.tables()
    assert "still running" not in str(said.value)
