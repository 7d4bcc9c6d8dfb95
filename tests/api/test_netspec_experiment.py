"""netspec.experiment: a file loaded and checked from Python, and run with param overrides
(real daemons and components; the demo's run is in test_netspec_results.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import textwrap
import threading

import pytest
from netspec import experiment, results
from netspec.protocol.errors import ConfigError, ConfigErrors, NetspecError
from netspec.protocol.exits import run_processes
from netspec.protocol.runrecord import read_run
from support import PROGRAMS, REPO, ns_control, wait_for

DEMO = REPO / "experiments" / "stimulus_response" / "stimulus_response.yaml"

BAD = """\
experiment: bad
hosts: {a: {}}
components:
  one: {host: c, program: ACTOR, args: [work]}
  two: {host: a, program: ACTOR, args: [work], prams: {}}
schedule:
  - launch
  - {phase: work, components: [three]}
"""

FAILS = """\
experiment: api-fails
hosts: {a: {}}
components:
  one: {host: a, program: ACTOR, args: ["launch,work,collect"], params: {fail_in: work, lines: 1}}
schedule: [launch, start_logging, work, stop_logging, collect]
streams: {play: {enable: [PLAY]}}
analysis: {pairs: {never: {start: PLAY/phase, end: PLAY/tick}}}
"""


class Collected:
    """An output that keeps what a run says, as ns_control's terminal would print it."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.errors: list[str] = []

    def out(self, text: str, end: bool = True) -> None:
        self.lines.append(text)

    def err(self, lines: list[str]) -> None:
        self.errors += lines

    def count(self, what: str, done: int, total: int) -> None:
        pass


def test_the_public_surface_is_pinned_and_every_name_says_what_it_is():
    assert sorted(experiment.__all__) == ["Checked", "ConfigError", "ConfigErrors", "Experiment",
                                          "NetspecError", "Output", "Terminal", "check", "load", "run"]
    assert [n for n in experiment.__all__ if not (getattr(experiment, n).__doc__ or "").strip()] == []


def test_check_returns_every_error_of_a_file_with_its_line_and_key_as_ns_control_check_says_them(
        experiment_file):
    path = experiment_file(BAD)
    checked = experiment.check(path)
    assert not checked.ok and checked.experiment is None
    assert [(e.line, e.key) for e in checked.errors] == [
        (4, "components.one.host"), (5, "components.two.prams"), (8, "schedule[1].components[0]")]
    assert all(e.file == str(path) for e in checked.errors)
    said = ns_control("check", str(path), cwd=path.parent)
    assert said.returncode == 2
    assert said.stderr.splitlines() == [*(f"error: {e}" for e in checked.errors), f"3 errors in {path}"]


def test_load_raises_every_error_and_check_gives_a_good_files_experiment():
    with pytest.raises(ConfigError) as raised:
        experiment.load(REPO / "tests" / "no-such.yaml")
    assert "no-such.yaml: cannot read" in str(raised.value)
    checked = experiment.check(DEMO)
    assert checked.ok and checked.errors == ()
    demo = checked.experiment
    assert (demo.name, demo.hosts, demo.components) == ("stimulus-response", ("a", "b"), ("server", "client"))
    assert demo.schedule[:2] == ("launch", "sync_clocks") and demo.params["client.count"] == 2000


def test_an_override_of_a_param_the_file_lacks_or_of_another_type_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(ConfigErrors) as raised:
        experiment.run(DEMO, {"clinet.count": 5, "client.cout": 5, "client.count": "many"},
                       runs=tmp_path / "runs")
    assert [str(e) for e in raised.value.errors] == [
        f"{DEMO}: client.count: cannot override: 'many' is of type str, and the file's 2000 of type int",
        f"{DEMO}: client.cout: cannot override: component 'client' declares no such param "
        "(it has: client.count, client.size)",
        f"{DEMO}: clinet.count: cannot override: no component 'clinet' (the file has: server, client)"]
    assert not (tmp_path / "runs").exists()


def test_a_campaign_file_runs_from_python_only_as_one_of_its_points(experiment_file, tmp_path):
    path = experiment_file(FAILS.replace("fail_in: work", "fail_in: none")
                           + "sweep: {params: {one.lines: [1, 2]}}\n")
    assert experiment.check(path).experiment.points == ({"one.lines": 1}, {"one.lines": 2})
    with pytest.raises(ConfigError, match="a campaign file: give its point as params="):
        experiment.run(path, runs=tmp_path / "runs")
    assert not (tmp_path / "runs").exists()


@pytest.mark.e2e
def test_a_run_where_an_event_loop_runs_goes_in_a_process_of_its_own_and_says_what_it_said(
        experiment_file, tmp_path, capfd):
    said = Collected()

    async def in_a_loop():  # as a Jupyter cell runs: in the kernel's event loop
        return experiment.run(experiment_file(FAILS), {"one.fail_in": "none"}, runs=tmp_path / "runs",
                              output=said)

    run = asyncio.run(in_a_loop())
    assert (run.outcome.status, [s.status for s in run.steps]) == ("ok", ["ok"] * 5)
    assert run.record.controller.pid != os.getpid() and not run_processes(run.id)
    assert said.lines[0] == f"netspec: running api-fails as {run.id}"
    assert said.errors == []
    assert capfd.readouterr() == ("", "")


@pytest.mark.e2e
def test_ctrl_c_where_an_event_loop_runs_interrupts_the_run_in_its_own_process(experiment_file, tmp_path):
    runs, said, failed = tmp_path / "runs", [], []

    def ctrl_c_in_work():
        try:
            wait_for(lambda: any(s.phase == "work" for s in _steps(runs)), what="the step work")
            results.open_run("latest", runs=runs).tables()
        except NetspecError as exc:  # the run is opened as it is now
            said.append(str(exc))
        except BaseException as exc:  # kept for the test's own thread, which raises it
            failed.append(exc)
        finally:  # in any case: the run hangs in work until interrupted
            os.kill(os.getpid(), signal.SIGINT)

    async def in_a_loop():  # as a Jupyter cell runs: Ctrl-C raises KeyboardInterrupt where it is
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            return experiment.run(experiment_file(FAILS.replace("fail_in", "hang_in")), runs=runs)
        finally:
            signal.signal(signal.SIGINT, previous)

    sender = threading.Thread(target=ctrl_c_in_work)
    sender.start()
    try:
        run = asyncio.run(in_a_loop())
    finally:
        sender.join(timeout=30)
        if failed:  # the sender's own failure, not the Ctrl-C it sent so as not to hang
            raise failed[0]
    assert not sender.is_alive(), "the thread sending Ctrl-C did not end within 30 s"
    assert said == [f"run {run.id} is still running: its result set is made at its end "
                    "(open the run again then)"]
    outcome = run.outcome
    assert (outcome.status, outcome.exit_code, outcome.error.phase) == ("interrupted", 130, "work")
    assert not run_processes(run.id)


def _steps(runs):
    latest = runs / "latest"
    return read_run(latest).steps if (latest / "run.json").exists() else []


@pytest.mark.e2e
def test_a_failed_run_from_python_gives_its_outcome_and_says_it_only_on_the_output_given(
        experiment_file, tmp_path, capfd):
    said = Collected()
    run = experiment.run(experiment_file(FAILS), runs=tmp_path / "runs", output=said)
    assert (run.outcome.status, run.outcome.exit_code, run.outcome.ok) == ("failed", 1, False)
    assert run.outcome.error.phase == "work"
    assert "one fails in work as asked" in "\n".join(run.outcome.error.causes)
    assert [(s.phase, s.status) for s in run.steps] == [("launch", "ok"), ("start_logging", "ok"),
                                                         ("work", "failed")]
    assert [(h, c, e.status) for h, c, e in run.steps[2].participants()] == [("a", "one", "error")]
    with run.tables() as tables:  # what was gathered of a failed run is merged, and what its merge said
        assert tables.sql("SELECT count(*) FROM events WHERE entity = 'PLAY/phase'").fetchall() == [(1,)]
        assert tables.warnings[0].startswith("pair never matched nothing: no PLAY/phase was followed by")
    assert said.lines[0] == f"netspec: running api-fails as {run.id}"
    assert any("one fails in work as asked" in line for line in said.errors)
    assert capfd.readouterr() == ("", "")


@pytest.fixture
def experiment_file(tmp_path):
    def write(text: str):
        path = tmp_path / "exp.yaml"
        path.write_text(textwrap.dedent(text).replace("ACTOR", str(PROGRAMS / "actor.py")))
        return path
    return write
