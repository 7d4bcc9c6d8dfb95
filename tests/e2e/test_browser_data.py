"""The browser's data over real runs: the index, the panels' JSON, the campaign matrix, the
comparison, the report and the trace's flow arrows; and the app's refusals of bad input."""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from browser import run_ref, serving
from netspec.analysis.resultset import open_tables
from netspec.analysis.units import duration_text
from netspec.controller.record.rundir import RunDir
from netspec.protocol import ackjournal
from netspec.protocol.campaignrecord import read_campaign
from netspec.protocol.errors import ProtocolError
from netspec.protocol.exits import run_processes
from netspec.protocol.runoutcome import RunOutcome
from netspec.protocol.runrecord import RunError, Step, decode, read_run
from netspec.web import distributions, eventtable, panels, timeline
from netspec.web.catalog import Catalog, NotFound
from netspec.web.compare import NO_TEST, campaign_view, compare_runs
from support import REPO, ns_control, start_run, wait_for

pytestmark = pytest.mark.e2e


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_index_lists_every_run_and_campaign_with_its_status(results: Path):
    catalog = Catalog(results / "runs", results / "runs" / "campaigns")
    runs, campaigns, unreadable = catalog.index()
    by_experiment = {}
    for r in runs:
        by_experiment.setdefault(r.experiment, []).append(r)
    assert [r.status for r in by_experiment["browse-ok"]] == ["ok"]
    assert [r.status for r in by_experiment["browse-failing"]] == ["failed"]
    assert len(by_experiment["browse-sweep"]) == 4 and all(r.campaign for r in by_experiment["browse-sweep"])
    assert by_experiment["browse-ok"][0].hosts == 2 and by_experiment["browse-ok"][0].merged
    assert [c.points for c in campaigns] == [2]
    assert unreadable == []


def test_a_reference_resolves_only_to_a_run_under_the_root(results: Path):
    catalog = Catalog(results / "runs", results / "runs" / "campaigns")
    with pytest.raises(ProtocolError):
        catalog.run_path("../..")
    with pytest.raises(NotFound):
        catalog.run_path("browse-ok/no-such-run")
    with pytest.raises(NotFound):
        catalog.run_path("browse-ok")
    assert catalog.run_ref("/etc") is None


def test_the_timeline_has_a_bar_per_step_and_participant_placed_within_its_bound(results: Path):
    record = read_run(results / "runs" / run_ref(results, "browse-ok"))
    entered = sum(entry.entered_ns is not None for step in record.steps for *_, entry in step.participants())
    figure = timeline.timeline_figure(record)
    bars = [t for t in figure["data"] if t["type"] == "bar"]
    assert sum(len(t["y"]) for t in bars) == entered
    assert {t["name"] for t in bars} == {"ok"}
    rows = timeline.step_rows(record)
    assert [r["phase"] for r in rows] == [s.phase for s in record.steps]
    # Where the programs' starts were placed, their skew comes first, the daemons' beside it.
    placed = [(row, step.release) for row, step in zip(rows, record.steps, strict=True)
              if step.release.program is not None and step.release.program.skew_ns is not None]
    assert placed
    for row, release in placed:
        programs, daemons = (duration_text(r.skew_ns) for r in (release.program, release))
        assert row["skew"] == f"{programs} programs, {daemons} daemons", row


def test_the_failed_runs_triage_names_the_component_its_output_and_every_host(results: Path):
    run = results / "runs" / run_ref(results, "browse-failing")
    record = read_run(run)
    [failure] = timeline.failures(record, run)
    assert (failure["host"], failure["component"], failure["phase"]) == ("b", "w2", "work")
    assert "RuntimeError: w2 fails in work as asked" in failure["traceback"]
    assert failure["output"]["stdout"].splitlines()[-1] == "w2 line 39"
    assert "w2 stderr in work" in failure["output"]["stderr"]
    doing = timeline.doing_at(record, failure["instant_ns"])
    assert set(doing) == {"a", "b", "c"} and "w2 in work" in doing["b"]
    around = panels.around(open_tables(run / "merged"), failure["instant_ns"])
    assert any(e["entity"] == "NETSPECD/ack" for e in around["b"]["events"])


def test_distributions_are_aggregated_on_the_server_in_a_unit_that_suits_them(results: Path):
    run = results / "runs" / run_ref(results, "browse-ok")
    db = open_tables(run / "merged")
    dists = {d["name"]: d for d in distributions.distributions(db)}
    assert {"to_server", "to_client"} <= set(dists)
    d = dists["to_client"]
    assert d["count"] == 300 and d["unit"] in ("us", "ms") and 0 < d["p50"] <= d["p99"]
    assert sum(sum(t["y"]) for t in d["histogram"]["data"]) == 300
    assert len(d["ecdf"]["data"][0]["x"]) == distributions.ECDF_POINTS


def test_events_are_paged_and_filtered_with_bound_parameters(results: Path):
    run = results / "runs" / run_ref(results, "browse-failing")
    record = read_run(run)
    db = open_tables(run / "merged")
    origin = timeline.origin_ns(record)
    every = eventtable.events(db, origin, limit=500)
    assert every["total"] > 20 and every["rows"] == sorted(every["rows"], key=lambda r: r["ms"])
    # w1 on a logged its phase and 20 ticks in play, the step before the one that failed
    on_a = eventtable.events(db, origin, host="a", entity="PLAY/*", limit=5, offset=5)
    assert on_a["total"] == 1 + 20 and len(on_a["rows"]) == 5 and on_a["offset"] == 5
    assert {r["host"] for r in on_a["rows"]} == {"a"}
    assert eventtable.events(db, origin, text="' OR 1=1 --")["total"] == 0
    assert eventtable.events(db, origin, tag=7, entity="PLAY/tick")["total"] == 1


def test_the_campaign_matrix_has_a_row_per_point_and_says_what_differs_from_the_baseline(results: Path):
    [path] = (results / "runs" / "campaigns").glob("*/*/campaign.json")
    catalog = Catalog(results / "runs", results / "runs" / "campaigns")
    view = campaign_view(read_campaign(path.parent), catalog.run_ref)
    assert [r["label"] for r in view["rows"]] == ["client.size=64", "client.size=16384"]
    base, big = (r["cells"]["interval to_client"] for r in view["rows"])
    assert base["verdict"] == "baseline" and base["n"] == 2
    assert big["verdict"] in ("higher", "same", "lower") and big["mean"] > base["mean"]
    assert all(r["ref"] and r["ref"].startswith("browse-sweep/") for row in view["rows"] for r in row["runs"])
    assert [line["metric"] for line in view["lines"]] == view["metrics"]


def test_two_runs_compared_say_first_what_differs_between_them(results: Path):
    runs = results / "runs"
    first, last = (runs / run_ref(results, "browse-sweep", i) for i in (0, 3))
    view = compare_runs(first, last)
    assert view["differences"] == ["client.size: 64 -> 16384"]
    assert [s["phase"] for s in view["steps"]][:3] == ["launch", "sync_clocks", "start_logging"]
    assert view["unaligned"] == 0
    assert any(m["metric"] == "interval to_client" and m["verdict"] != NO_TEST for m in view["metrics"])


def test_every_result_set_has_a_report_that_fetches_nothing(results: Path):
    report = (results / "runs" / run_ref(results, "browse-ok") / "merged" / "report.html").read_text()
    assert 'id="plotly-packed"' in report and 'id="panels-packed"' in report  # web/pages.py `packed`
    # the scripts are inline (plotly.js's own strings name its web site: no fetch); the page
    # around them loads nothing (the browser test watches a report's requests)
    page = re.sub(r"<script[^>]*>.*?</script>", "", report, flags=re.S)
    assert "<script src" not in report and "<link rel=\"stylesheet\"" not in report
    assert "http" not in page


def test_the_trace_joins_each_pair_with_a_flow_arrow(results: Path):
    merged = results / "runs" / run_ref(results, "browse-ok") / "merged"
    trace = json.loads((merged / "trace.json").read_text())
    starts = {e["id"] for e in trace["traceEvents"] if e.get("ph") == "s"}
    ends = {e["id"] for e in trace["traceEvents"] if e.get("ph") == "f"}
    assert len(starts) == 600 and starts == ends


def test_the_app_serves_pages_and_refuses_what_it_does_not_offer(results: Path):
    ref = run_ref(results, "browse-ok")
    with serving(results) as url:
        status, body = _get(f"{url}/")
        assert status == 200 and b"browse-ok" in body
        status, body = _get(f"{url}/api/run/{ref}/timeline")
        assert status == 200 and json.loads(body)["data"]
        assert _get(f"{url}/run/{ref}/file/run.json")[0] == 200
        for bad in ("..%2Frun.json", "merged/..%2F..%2Frun.json", "hosts/a/netspecd.log"):
            assert _get(f"{url}/run/{ref}/file/{bad}")[0] == 404
        status, body = _get(f"{url}/api/run/{ref}/events?tag=x")
        assert status == 400 and "tag='x' is not an integer" in json.loads(body)["error"]
        assert _get(f"{url}/api/run/{ref}/nosuchpanel")[0] == 404
        assert _get(f"{url}/api/run/..%2F..%2Fetc/passwd/timeline")[0] in (400, 404)
        assert _get(f"{url}/compare?a={ref}")[0] == 400


def test_an_unreadable_run_or_campaign_is_said_not_dropped(tmp_path: Path):
    for path in (tmp_path / "runs/exp/r1/run.json", tmp_path / "campaigns/exp/c1/campaign.json"):
        path.parent.mkdir(parents=True)
        path.write_text("{not json")
    runs, campaigns, unreadable = Catalog(tmp_path / "runs", tmp_path / "campaigns").index()
    assert (runs, campaigns) == ([], [])
    assert [u.split(":")[0] for u in unreadable] == [str(tmp_path / "runs/exp/r1/run.json"),
                                                     str(tmp_path / "campaigns/exp/c1/campaign.json")]


def test_a_campaign_with_a_value_of_the_wrong_type_is_said_naming_its_file_and_key(tmp_path: Path):
    state = json.loads(next((REPO / "tests/data/campaigns/mixed").glob("*/campaign.json")).read_text())
    state["points"][0]["runs"][1]["counted"] = "yes"
    path = tmp_path / "runs/campaigns/mixed/c1/campaign.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(state))
    _, campaigns, unreadable = Catalog(tmp_path / "runs", tmp_path / "runs/campaigns").index()
    said = "Expected `bool`, got `str` - at `$.points[0].runs[1].counted`"
    assert campaigns == [] and unreadable == [f"{path}: not a campaign record: {said}"]
    with serving(tmp_path) as url:
        status, body = _get(f"{url}/campaign/mixed/c1")
        assert status == 400 and f"{path}: not a campaign record: {said}".encode() in body, body
        status, body = _get(f"{url}/")
        assert status == 200 and str(path).encode() in body, body


def test_a_run_page_says_which_journal_entry_a_kill_cut_short(tmp_path: Path):
    run = RunDir.create(tmp_path / "runs", "cut", "x: 1\n")
    run.record.steps.append(Step("work", "running"))
    run.journal_step(0)
    run.finish(RunOutcome("interrupted", RunError("Interrupted", "killed")))
    (run.path / ackjournal.ACK_JOURNAL).write_bytes(ackjournal.frame(0, 40, b"x" * 50)[:20])
    with serving(tmp_path) as url:
        status, body = _get(f"{url}/run/{run_ref(tmp_path, 'cut')}")
    assert status == 200, body
    assert (b"cut short by a kill: run.acks frame 1 (20 bytes, step 0 &#39;work&#39;): the acks it held "
            b"are not in this record") in body


# A k-of-n step whose straggler is ended at the step's deadline, having never acked: its
# step record has no entered_ns (that comes with an ack), and it is skipped in the next step.
ENDED_AT_DEADLINE = """\
experiment: ended
hosts: {a: {}, b: {}}
components:
  one: {host: a, program: ACTOR, args: ["launch,work,collect"], params: {hang_in: work}}
  two: {host: b, program: ACTOR, args: ["launch,work,collect"]}
schedule: [launch, {phase: work, need: 1, deadline: 1s}, collect]
"""


def test_a_participant_ended_at_its_deadline_is_on_the_timeline_and_in_the_triage_as_show_lists_it(
        experiment, tmp_path: Path):
    done = ns_control("run", "--no-merge", str(experiment(ENDED_AT_DEADLINE)), cwd=tmp_path)
    assert done.returncode == 3, done.stdout + done.stderr
    ref = run_ref(tmp_path, "ended")
    shown = ns_control("show", str(tmp_path / "runs" / ref), cwd=tmp_path).stdout
    assert "a/one: no ack within the deadline of 1 s: ended" in shown, shown
    assert "a/one: ended in phase 'work'" in shown, shown
    with serving(tmp_path) as url:
        status, body = _get(f"{url}/api/run/{ref}/timeline")
        assert status == 200, body
        drawn = {(t["name"], row) for t in json.loads(body)["data"] if t["type"] == "bar" for row in t["y"]}
        status, body = _get(f"{url}/api/run/{ref}/triage")
        assert status == 200, body
        failures = json.loads(body)["failures"]
    assert {("killed", "a/one"), ("skipped", "a/one"), ("ok", "b/two")} <= drawn, drawn
    assert [(f["phase"], f["host"], f["component"], f["outcome"], f["message"]) for f in failures] == [
        ("work", "a", "one", "killed", "no ack within the deadline of 1 s: ended")]


def _in_work(record: dict) -> bool:
    return bool(record.get("steps")) and record["steps"][-1]["phase"] == "work"


def test_a_host_whose_daemon_was_lost_mid_step_is_on_the_timeline_and_in_the_triage_as_show_says_it_waited(
        experiment, tmp_path: Path):
    path = experiment(ENDED_AT_DEADLINE.replace("need: 1, deadline: 1s", "deadline: 5m"))
    proc, record = start_run(path, tmp_path, _in_work, "the run to reach phase 'work'")
    os.kill(record["hosts"]["a"]["daemon_pid"], signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == 1
    wait_for(lambda: not run_processes(record["id"]), what="the run's processes to end")
    ref = run_ref(tmp_path, "ended")
    shown = ns_control("show", str(tmp_path / "runs" / ref), cwd=tmp_path).stdout
    work = next(line for line in shown.splitlines() if line.lstrip().startswith("work"))
    assert "a waiting" in work, shown
    with serving(tmp_path) as url:
        drawn = {(t["name"], row) for t in json.loads(_get(f"{url}/api/run/{ref}/timeline")[1])["data"]
                 if t["type"] == "bar" for row in t["y"]}
        failures = json.loads(_get(f"{url}/api/run/{ref}/triage")[1])["failures"]
    assert ("waiting", "a") in drawn, drawn
    assert [(f["phase"], f["host"], f["component"], f["outcome"]) for f in failures] == [
        ("work", "a", "", "waiting")]
    assert failures[0]["message"].startswith("connection lost"), failures


def test_a_run_whose_controller_was_killed_is_interrupted_on_its_page_as_in_show_and_the_index(
        experiment, tmp_path: Path):
    path = experiment(ENDED_AT_DEADLINE.replace("need: 1, deadline: 1s", "deadline: 5m"))
    proc, _ = start_run(path, tmp_path, _in_work, "the run to reach phase 'work'")
    proc.kill()
    proc.communicate(timeout=30)
    ref = run_ref(tmp_path, "ended")
    saved = (tmp_path / "runs" / ref / "run.json").read_bytes()
    with serving(tmp_path) as url:
        status, body = _get(f"{url}/api/run/{ref}/live")
        assert status == 200, body
        live = json.loads(body)
        status, page = _get(f"{url}/run/{ref}")
        assert status == 200, page
    [entry], _, _ = Catalog(tmp_path / "runs", tmp_path / "campaigns").index()
    # The browser only reads: run.json is as the killed controller left it.
    assert (tmp_path / "runs" / ref / "run.json").read_bytes() == saved
    shown = ns_control("show", str(tmp_path / "runs" / ref), cwd=tmp_path).stdout
    assert shown.split()[3] == "interrupted", shown
    assert entry.status == live["status"] == "interrupted"
    assert b'id="run-status">interrupted<' in page and b"live: this page follows the run" not in page
    assert b"ended without finishing the run" in page


def test_a_message_steps_starts_without_a_clock_estimate_are_no_trouble_in_the_browser_as_in_show():
    # Before sync_clocks a step released by message has no estimate of any start: no trouble,
    # `show` says nothing of them; a step that gives a skew all the same says those it left out.
    steps = [{"phase": "launch", "status": "ok",
              "release": {"mode": "message", "starts": 2, "unplaced": ["a", "b"]}},
             {"phase": "work", "status": "ok",
              "release": {"mode": "message", "starts": 3, "skew_ns": 5000, "unplaced": ["c"]}}]
    record = decode(json.dumps({"format": 1, "id": "r", "experiment": "e", "status": "ok",
                                "steps": steps}).encode(), "run.json")
    shown = [bool(step.release.troubles()) for step in record.steps]
    assert shown == [False, True]
    assert [bool(row["troubles"]) for row in timeline.step_rows(record)] == shown
