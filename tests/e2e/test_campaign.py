"""Campaigns: sweep expansion, the stop rule, hooks and the report over real runs, fastfail,
resume after the controller is SIGKILLed mid-run, and rerun from a run directory alone."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from netspec.controller.campaigns.campaign import _decide
from netspec.controller.experiment.load import load
from netspec.controller.experiment.model import Campaign
from netspec.protocol.campaignrecord import CampaignRun, Point, read_campaign
from netspec.protocol.errors import ConfigError
from netspec.protocol.exits import run_processes
from netspec.protocol.runrecord import read_run
from support import REPO, latest_record, ns_control, wait_for

pytestmark = pytest.mark.e2e

STIMULUS = REPO / "experiments" / "stimulus_response" / "stimulus.py"

BASE = f"""\
experiment: camp
hosts: {{a: {{}}, b: {{}}}}
components:
  server: {{host: a, program: {STIMULUS}, args: [--role, server], params: {{size: 32}}}}
  client: {{host: b, program: {STIMULUS}, args: [--role, client], params: {{count: 50, size: 32}}}}
streams: {{stim: {{enable: [STIM]}}}}
schedule: [launch, start_logging, {{phase: listen, components: [server]}},
           {{phase: run, components: [client]}}, stop_logging]
"""


def campaign_state(tmp_path):
    (path,) = (tmp_path / "runs" / "campaigns").glob("*/*/campaign.json")
    return read_campaign(path.parent)


def test_a_sweep_expands_lists_and_ranges_as_a_product_or_zipped(experiment):
    plan = load(experiment(BASE + textwrap.dedent("""\
        sweep:
          params:
            client.count: [10, 20]
            client.size: {from: 1, to: 32, factor: 2}
        """)))
    points = plan.campaign.points
    assert len(points) == 12 and points[0] == {"client.count": 10, "client.size": 1}
    assert [p["client.size"] for p in points[:6]] == [1, 2, 4, 8, 16, 32]
    typed = BASE.replace("params: {size: 32}", "params: {size: 32, mode: x}").replace(
        "count: 50, size: 32", "count: 50, size: 32, rate: 1.0")
    zipped = load(experiment(typed + textwrap.dedent("""\
        sweep:
          mode: zip
          params:
            client.rate: {from: 0.5, to: 1.5, step: 0.5}
            server.mode: [a, b, c]
        """))).campaign.points
    assert zipped == ({"client.rate": 0.5, "server.mode": "a"}, {"client.rate": 1.0, "server.mode": "b"},
                      {"client.rate": 1.5, "server.mode": "c"})
    assert load(experiment(BASE + "repeat: {runs: 3}\n")).campaign.points == ({},)


@pytest.mark.parametrize(("section", "message"), [
    ("sweep: {params: {clinet.size: [1]}}", "sweep.params.clinet.size: unknown component 'clinet' (did"),
    ("sweep: {params: {client.size: {from: 1, to: 4, step: 1, factor: 2}}}", "one of 'step' or 'factor'"),
    ("sweep: {mode: zip, params: {client.size: [1, 2], server.size: [1]}}", "zip takes lists of one length"),
    ("repeat: {runs: 2, until: 'hw < 5', metric: m}", "repeat.until: predicate 'hw < 5': unknown name 'hw'"),
    ("repeat: {until: 'hw_pct < 5'}", "repeat.until: 'until' needs the 'metric'"),
    ("repeat: {runs: 5, max: 2}", "repeat.max: max 2 is below runs 5"),
    ("hooks: {setup: [{command: x, hosts: [c]}]}", "hooks.setup[0].hosts[0]: unknown host 'c'"),
    ("sweep: {params: {client.size: {from: 1, to: 4, stpe: 1}}}",
     "exp.yaml:9: sweep.params.client.size.stpe: unknown key 'stpe' (did you mean 'step'?)"),
    ("sweep: {params: {client.size: [16, big]}}",
     "exp.yaml:9: sweep.params.client.size[1]: 'big' is a string, and param 'size' of component 'client' "
     "is an integer (32)"),
    ("sweep: {params: {client.size: {from: 0.5, to: 2, step: 0.5}}}",
     "exp.yaml:9: sweep.params.client.size: 0.5 is a number, and param 'size' of component 'client' "
     "is an integer (32)"),
    ("repeat: {metric: interval STIM/rt}",
     "exp.yaml:9: repeat.metric: 'interval STIM/rt': no program of the file declares an interval 'STIM/rt' "
     "(they declare: STIM/rtt) (did you mean 'STIM/rtt'?)"),
    ("repeat: {metric: cpu busy a}",
     "exp.yaml:9: repeat.metric: 'cpu busy a': CPU is sampled by CAMP, and this file has no services: camp:"),
    ("services: {camp: {}}\nrepeat: {metric: cpu of client on a}",
     "exp.yaml:10: repeat.metric: 'cpu of client on a': component 'client' runs on host 'b', not 'a'"),
    ("services: {camp: {processes: [server]}}\nrepeat: {metric: cpu of client on b}",
     "exp.yaml:10: repeat.metric: 'cpu of client on b': CAMP samples only the processes of server"),
])
def test_a_bad_campaign_section_names_its_key(experiment, section, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load(experiment(BASE + section + "\n"))


def runs(*outcomes):
    return Point(params={}, label="", runs=[
        CampaignRun(id=None, path=None, status=s, value=v, counted=s == "ok") for s, v in outcomes])


def test_the_stop_rule_stops_when_the_predicate_holds_and_at_the_maximum():
    rule = Campaign(({},), runs=3, max_runs=5, until="hw_pct < 5", metric="m")
    assert _decide(runs(("ok", 10.0), ("ok", 10.1)), rule) is None  # fewer than runs
    assert _decide(runs(("ok", 10.0), ("ok", 10.1), ("ok", 9.9)), rule) == "until"
    noisy = [("ok", 10.0), ("ok", 20.0), ("ok", 5.0)]
    assert _decide(runs(*noisy), rule) is None
    assert _decide(runs(*noisy, ("ok", 30.0), ("ok", 1.0)), rule) == "max"
    assert _decide(runs(*noisy, ("failed", None)), rule) is None
    assert _decide(runs(*noisy, ("failed", None), ("failed", None)), rule) == "max"
    assert _decide(runs(("ok", 1.0)), Campaign(({},), runs=1)) == "runs"


def test_a_point_is_run_at_most_max_times_and_fails_without_its_counted_runs():
    rule = Campaign(({},), runs=2, max_runs=3)
    assert _decide(runs(("failed", None), ("failed", None)), rule) is None
    assert _decide(runs(*[("failed", None)] * 3), rule) == "failures"
    assert _decide(runs(("failed", None), ("ok", 1.0), ("failed", None)), rule) == "failures"
    assert _decide(runs(("interrupted", None), ("failed", None), ("ok", 1.0)), rule) is None
    once = Campaign(({},), runs=1)
    assert _decide(runs(("failed", None)), once) == "failures"
    warm = Campaign(({},), runs=1, warmup=1)
    assert _decide(runs(("failed", None)), warm) is None
    assert _decide(runs(("failed", None), ("failed", None)), warm) == "failures"


EXIT_WITH_CODE = "import json, os, sys; sys.exit(json.loads(os.environ['NETSPEC_PARAMS'])['code'])"


def test_a_campaign_whose_point_fails_every_run_fails_after_max_runs_of_it(experiment, tmp_path):
    path = experiment(textwrap.dedent(f"""\
        experiment: failing_point
        components:
          bad:
            command: [{sys.executable}, -c, "{EXIT_WITH_CODE}"]
            start: run
            params: {{code: 0}}
        schedule: [launch, run]
        sweep: {{params: {{bad.code: [0, 3]}}}}
        repeat: {{runs: 1, max: 2}}
        hooks: {{postcleanup: ["echo postcleanup >> {tmp_path / 'hooks.txt'}"]}}
        """))
    done = ns_control("run", "-q", str(path), cwd=tmp_path, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    state = campaign_state(tmp_path)
    assert state.status == "failed"
    assert [(p.done, [r.status for r in p.runs]) for p in state.points] == [
        ("runs", ["ok"]), ("failures", ["failed", "failed"])]
    said = "stopped: 1 of 2 point(s) failed: bad.code=3 (0 of 1 counted, 2 of 2 run(s) failed)"
    assert said in done.stderr, done.stderr
    again = ns_control("resume", state.id, cwd=tmp_path, timeout=120)
    assert again.returncode == 1 and said in again.stderr, again.stdout + again.stderr
    assert campaign_state(tmp_path).points == state.points
    assert (tmp_path / "hooks.txt").read_text() == "postcleanup\n"


def test_a_campaign_runs_every_point_with_its_hooks_and_reports_them(experiment, tmp_path):
    log = tmp_path / "hooks.txt"
    path = experiment(BASE + textwrap.dedent(f"""\
        sweep:
          mode: zip
          params: {{client.size: [16, 64], server.size: [16, 64]}}
        repeat: {{runs: 2, warmup: 1, metric: interval STIM/rtt}}
        hooks:
          presetup: ["echo presetup >> {log}"]
          setup: ["echo setup $NETSPEC_POINT $NETSPEC_REPETITION >> {log}"]
          cleanup: [{{command: "echo cleanup >> {log}", hosts: [b]}}]
          postcleanup: ["echo postcleanup >> {log}"]
        """))
    done = ns_control("run", "-q", str(path), cwd=tmp_path, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    state = campaign_state(tmp_path)
    assert state.status == "done" and [p.done for p in state.points] == ["runs", "runs"]
    assert [[(r.status, r.counted) for r in p.runs] for p in state.points] == [
        [("ok", False), ("ok", True), ("ok", True)]] * 2
    assert log.read_text().splitlines() == [
        "presetup", *(line for size in (16, 64) for k in range(3)
                      for line in (f'setup {{"client.size": {size}, "server.size": {size}}} {k}', "cleanup")),
        "postcleanup"]
    first = state.points[1].runs[2]
    record = json.loads((tmp_path / first.path / "run.json").read_text())
    assert record["campaign"] == {"id": state.id, "point": {"client.size": 64, "server.size": 64},
                                  "repetition": 2}
    assert "size: 64" in (tmp_path / first.path / "experiment.yaml").read_text()
    assert first.value > 0
    report = ns_control("report", state.id[-6:], "--csv", "points.csv", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    against = "client.size=64 server.size=64 against client.size=16 server.size=16: interval STIM/rtt"
    assert against in report.stdout
    plots = tmp_path / "runs" / "campaigns" / "camp" / state.id / "plots"
    assert {p.name for p in plots.iterdir()} >= {"interval_STIM_rtt-bars.png"}
    assert (tmp_path / "points.csv").read_text().count("interval STIM/rtt") == 2


def test_a_campaign_run_and_its_rerun_cite_the_lines_of_the_file_each_read(experiment, tmp_path):
    path = experiment(textwrap.dedent("""\
        experiment: cited
        components:
          work: {command: "true", start: run, params: {size: 1, count: 1}}
        schedule:
          - launch
          - {phase: run, params: {size: 2}}
        sweep: {params: {work.count: [1, 2]}}
        """))
    done = ns_control("run", "-q", str(path), cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    warning = ("schedule[1].params.size: overrides param size of component 'work' in phase 'run': 1 -> 2 "
               "(a step that names its components gives them its params without a warning)")
    # Said once for the campaign, kept in the record of each of its runs.
    assert done.stderr.count(f"warning: {path}:6: {warning}\n") == 1, done.stderr
    (run,), (other,) = (p.runs for p in campaign_state(tmp_path).points)
    for r in (run, other):
        assert read_run(Path(r.path)).plan.warnings == [f"{path}:6: {warning}"]
    again = ns_control("rerun", run.id, "-q", cwd=tmp_path, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    copy = Path(run.path) / "experiment.yaml"
    line = next(n for n, text in enumerate(copy.read_text().splitlines(), 1) if "size: 2" in text)
    assert latest_record(tmp_path / "runs")["plan"]["warnings"] == [f"{copy}:{line}: {warning}"]


def test_resume_and_report_of_a_malformed_campaign_json_name_the_file_and_the_key(tmp_path):
    state = json.loads(next((REPO / "tests/data/campaigns/mixed").glob("*/campaign.json")).read_text())
    path = tmp_path / "runs" / "campaigns" / "mixed" / state["id"] / "campaign.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**state, "points": 5}))
    said = f"{path.relative_to(tmp_path)}: not a campaign record: Expected `array`, got `int` - at `$.points`"
    for command in ("resume", "report"):
        done = ns_control(command, state["id"], cwd=tmp_path)
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"error: not a campaign: {said}\n" == done.stderr


def test_runs_elsewhere_keep_their_campaigns_under_the_same_root(experiment, tmp_path):
    path = experiment("experiment: rooted\ncomponents:\n  x: {command: \"true\"}\nschedule: [launch]\n"
                      "repeat: {runs: 1}\n")
    done = ns_control("run", "-q", str(path), "--runs", "elsewhere", cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    (state,) = (tmp_path / "elsewhere" / "campaigns" / "rooted").glob("*/campaign.json")
    assert not (tmp_path / "campaigns").exists() and not (tmp_path / "runs").exists()
    cid = read_campaign(state.parent).id
    again = ns_control("resume", cid, "--runs", "elsewhere", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"campaign {cid} is done: nothing to resume" in again.stdout


def test_fastfail_stops_at_the_first_failed_run_and_notifies(experiment, tmp_path):
    note = tmp_path / "notified.txt"
    path = experiment(textwrap.dedent(f"""\
        experiment: failing
        components:
          bad: {{command: "exit 3", start: run, params: {{x: 0}}}}
        schedule: [launch, run]
        sweep: {{params: {{bad.x: [1, 2, 3]}}}}
        hooks: {{fastfail: true, notify: "echo $NETSPEC_FAILURE > {note}"}}
        """))
    done = ns_control("run", "-q", str(path), cwd=tmp_path)
    assert done.returncode == 1
    state = campaign_state(tmp_path)
    assert state.status == "failed" and len(state.runs()) == 1
    assert note.read_text().strip() == "fastfail: a run of bad.x=1 failed"
    assert "stopped: fastfail" in done.stderr


def test_a_campaign_killed_mid_run_resumes_without_orphans_or_duplicates(experiment, tmp_path):
    path = experiment(textwrap.dedent("""\
        experiment: resumable
        components:
          work: {command: [sleep, "1.5"], start: run}
        schedule: [launch, run]
        repeat: {runs: 3}
        """))
    proc = subprocess.Popen([sys.executable, "-m", "netspec.controller.cli", "run", "-q", str(path)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def second_run_under_way():
        try:
            state = campaign_state(tmp_path)
        except ValueError:  # not there yet
            return None
        current = state.current
        return len(state.points[0].runs) == 1 and current and current.run and current

    current = wait_for(second_run_under_way, timeout=60, what="the second run")
    lost = current.run
    wait_for(lambda: run_processes(lost.rsplit("/", 1)[1]), what="the run's processes")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    # Local daemons end their runs by themselves once their controller is gone.
    wait_for(lambda: not run_processes(lost.rsplit("/", 1)[1]), timeout=30, what="orphans to end")
    state = campaign_state(tmp_path)
    done = ns_control("resume", state.id, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    state = campaign_state(tmp_path)
    outcomes = [(r.path, r.status, r.counted) for r in state.points[0].runs]
    assert [o[1:] for o in outcomes] == [("ok", True), ("interrupted", False), ("ok", True), ("ok", True)]
    assert outcomes[1][0] == lost and len({o[0] for o in outcomes}) == 4
    assert json.loads((tmp_path / lost / "run.json").read_text())["status"] == "interrupted"
    assert state.status == "done" and state.current is None
    again = ns_control("resume", state.id, cwd=tmp_path)
    assert again.returncode == 0 and "is done: nothing to resume" in again.stdout


def test_rerun_repeats_a_run_from_its_directory_alone(experiment, tmp_path):
    program = tmp_path / "copy_of_stimulus.py"
    program.write_bytes(STIMULUS.read_bytes())
    path = experiment(BASE.replace(str(STIMULUS), "copy_of_stimulus.py"))
    assert ns_control("run", "-q", str(path), cwd=tmp_path).returncode == 0
    first = latest_record(tmp_path / "runs")
    program.unlink()  # the run directory keeps its own copy
    done = ns_control("rerun", first["id"], "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    second = latest_record(tmp_path / "runs")
    assert second["rerun_of"] == first["id"] and second["status"] == "ok"
    assert second["experiment_sha256"] == first["experiment_sha256"]
    files = [(tmp_path / "runs" / "camp" / r["id"] / "experiment.yaml").read_text() for r in (first, second)]
    assert files[0] == files[1]
    assert [[p["sha256"] for p in r["programs"].values()] for r in (first, second)] == [
        [p["sha256"] for p in first["programs"].values()]] * 2
    assert second["plan"]["components"][1]["params"] == first["plan"]["components"][1]["params"]


PARTIAL = """\
experiment: partial_point
components:
  short: {command: [sleep, "0.2"], start: run}
schedule: [launch, run]
faults:
  - {kill: short, at: {phase: run, after: 20s}}   # never: the run is over first, so partial
repeat: REPEAT
"""


@pytest.mark.parametrize("repeat, code, status", [
    ("{runs: 1, max: 1}", 1, "failed"), ("{runs: 1, count_partial: true}", 0, "done")])
def test_a_campaign_counts_a_partial_run_only_when_told_and_says_it_apart_from_failed(
        experiment, tmp_path, repeat, code, status):
    path = experiment(PARTIAL.replace("REPEAT", repeat))
    done = ns_control("run", "-q", str(path), cwd=tmp_path, timeout=120)
    assert done.returncode == code, done.stdout + done.stderr
    state = campaign_state(tmp_path)
    assert state.status == status
    [point] = state.points
    assert [(r.status, r.counted) for r in point.runs] == [("partial", status == "done")]
    if status == "done":
        assert "is partial: counted (repeat: count_partial)" in done.stderr, done.stderr
    else:
        assert "(0 of 1 counted, 0 of 1 run(s) failed, 1 partial: not counted (repeat: count_partial " \
               "is false))" in done.stderr, done.stderr
