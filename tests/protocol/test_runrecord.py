"""run.json as one typed record: older records read whole, a malformed one is refused naming
the place, and a run's outcome is decided in one place."""

import json
import os
import shutil
import subprocess

import msgspec
import pytest
from netspec.controller.record.rundir import RunDir
from netspec.protocol.campaignrecord import SETUP_FAILED
from netspec.protocol.errors import Interrupted, NetspecError, StepFailed
from netspec.protocol.runoutcome import RunOutcome
from netspec.protocol.runrecord import RunRecord, Salvage, Step, decode, encode, read_run
from support import REPO, ns_control

STORED = REPO / "tests" / "data" / "runs"
# One run directory of each run.json format this netspec reads: format 1, as the untyped
# controller wrote it (every key it had, "error": null included).
FORMATS = {1: STORED / "stimulus-response" / "20261121T181343Z-23d1a4"}
RUNNING = RunRecord(format=1, id="x", experiment="e", status="running")
# A run of a campaign through a fan-out tree, its clocks synchronised and a step released at an
# instant, as the controller wrote it before its release, clocks, tree and campaign were typed.
RELEASED = REPO / "tests" / "data" / "typed-runs" / "released" / "20261126T023546Z-c8c0c2"


def _said(value):
    """What a record says: its values but for those that say nothing (null, empty, "")."""
    if isinstance(value, dict):
        return {k: _said(v) for k, v in value.items() if v is not None and v not in ({}, [], "")}
    if isinstance(value, list):
        return [_said(v) for v in value]
    return value


def _within(older, newer):
    """Whether everything `older` says, `newer` says alike (it may say more: keys added since)."""
    if isinstance(older, dict):
        return isinstance(newer, dict) and all(k in newer and _within(v, newer[k]) for k, v in older.items())
    if isinstance(older, list):
        return isinstance(newer, list) and len(older) == len(newer) and all(map(_within, older, newer))
    return older == newer


@pytest.mark.parametrize("version", sorted(FORMATS))
def test_a_run_json_of_every_format_reads_into_the_typed_record_keeping_every_value(version):
    stored = json.loads((FORMATS[version] / "run.json").read_text())
    assert stored["format"] == version
    record = read_run(FORMATS[version])
    assert record.status == "ok" and record.steps[4].phase == "run"
    assert record.steps[4].hosts["b"].components["client"].message.startswith("2000 round trips")
    # Every key the file has is a field of the record: written back, nothing is lost.
    assert _within(_said(stored), _said(msgspec.to_builtins(record)))
    assert decode(encode(record), "again") == record


def _fields(struct):
    """A Struct's values by field name, each Struct within as such a dict too."""
    return {name: _fields(value) if isinstance(value, msgspec.Struct) else value
            for name in struct.__struct_fields__ if (value := getattr(struct, name)) is not None}


def test_a_steps_release_the_clocks_the_tree_and_the_campaign_read_back_typed_with_every_value():
    stored = json.loads((RELEASED / "run.json").read_text())
    record = read_run(RELEASED)
    releases = [step["release"] for step in stored["steps"]]
    assert [r["mode"] for r in releases] == ["message", "message", "at", "message", "message"]
    # Every value the untyped controller wrote is a field's value, the same, nested alike.
    for said, step in zip(releases, record.steps, strict=True):
        assert said == {k: v for k, v in _fields(step.release).items() if v not in ([], {})}
    work = record.steps[2].release
    assert (work.mode, work.instant_ns) == ("at", releases[2]["instant_ns"])
    assert work.program.skew_ns == releases[2]["program"]["skew_ns"] == work.headline_ns
    assert _fields(record.clksync) == stored["clksync"] and record.clksync.reference == "h0"
    assert _fields(record.fan_out) == stored["fan_out"] == {"width": 2, "depth": 2, "relays": 1,
                                                            "first": ["h1", "h2"]}
    assert _fields(record.campaign) == stored["campaign"]
    assert record.campaign.point == {"c0.fail_in": "never"} and record.campaign.repetition == 0
    # Written again, it says all it said, in the same layout.
    assert _within(stored, msgspec.to_builtins(record))
    assert decode(encode(record), "again") == record


def test_a_run_json_with_a_value_of_the_wrong_type_is_refused_naming_where_it_is(tmp_path):
    shutil.copytree(STORED, tmp_path / "runs")
    path = next((tmp_path / "runs").glob("*/*/run.json"))
    stored = json.loads(path.read_text())
    stored["steps"][4]["hosts"]["b"]["components"]["client"]["status"] = 5
    path.write_text(json.dumps(stored))
    with pytest.raises(NetspecError, match=r"run.json: not a run record: Expected `str`, got `int` - "
                                           r"at `\$.steps\[4\].hosts\[...\].components\[...\].status`"):
        read_run(path.parent)
    shown = ns_control("show", "23d1a4", cwd=tmp_path)  # said as an error, never a traceback
    assert shown.returncode == 1 and "Traceback" not in shown.stderr
    assert "not a run record: Expected `str`, got `int`" in shown.stderr
    for command, nothing in (("ls", "no runs"), ("results", "no merged result sets")):
        listed = ns_control(command, cwd=tmp_path)  # left out of the list, and said
        assert listed.stdout.startswith(nothing)
        assert listed.stderr.startswith(f"warning: not listed: {path.relative_to(tmp_path)}: not a run "
                                        "record: Expected `str`, got `int`")


def test_a_run_ends_ok_partial_failed_or_interrupted_with_its_exit_code_decided_once():
    ok = RunOutcome.ended(None, "collect", [], [])
    assert (ok.status, ok.exit_code, ok.error) == ("ok", 0, None)
    unclean = [(f"h{i}", "c: killed by signal 9 at its end", f"host h{i}: c: killed by signal 9 at its end")
               for i in range(3)]
    partial = RunOutcome.ended(None, "collect", ["phase 'work', host a: one: boom"], unclean)
    assert (partial.status, partial.exit_code) == ("partial", 3)
    assert partial.error.message == ("every step got through, but 1 participant(s) did not and "
                                     "3 component(s) did not end cleanly")
    # The three alike are one cause that counts them.
    assert len(partial.error.causes) == 2 and partial.error.phase is None
    assert RunOutcome("partial", partial.error).stopped_in(RUNNING) == "none"
    stopped = RunOutcome.ended(Interrupted("interrupted by the user"), "work", [], [])
    assert (stopped.status, stopped.exit_code, stopped.error.phase) == ("interrupted", 130, "work")
    failed = RunOutcome.ended(NetspecError("could not reach host b"), "", [], [])
    assert (failed.status, failed.exit_code, failed.error.phase) == ("failed", 1, None)
    assert failed.stopped_in(RUNNING) == "before the first step"
    launched = RunRecord(format=1, id="x", experiment="e", status="failed", steps=[Step("launch", "failed")])
    assert failed.stopped_in(launched) == "launch"
    step = RunOutcome.ended(StepFailed("work", {"a": NetspecError("boom"), "b": "ok"}), "work", [], [])
    assert (step.status, step.error.type, step.error.causes) == ("failed", "StepFailed", ["boom"])


def test_a_running_run_whose_controller_is_gone_is_interrupted_wherever_it_is_read(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    run = RunDir.create(tmp_path / "runs", "gone", "x: 1\n", steps=[Step("work", "running")])
    assert RunOutcome.of(run.record).status == "running"
    run.record.controller.pid, run.record.controller.pid_started = dead.pid, 1
    outcome = RunOutcome.of(run.record)
    assert (outcome.status, outcome.exit_code, outcome.error.phase) == ("interrupted", 130, "work")
    assert outcome.error.message.startswith(f"its controller (pid {dead.pid}) ended without finishing")
    alive = RunDir.create(tmp_path / "runs", "alive", "x: 1\n")
    assert alive.record.controller.pid == os.getpid() and RunOutcome.of(alive.record).status == "running"


def test_a_run_json_plan_reads_typed_to_its_last_part_in_every_format():
    old, released = read_run(FORMATS[1]).plan, read_run(RELEASED).plan
    # The first records named a host's name and address only: the rest reads at its default.
    assert (old.hosts[0].name, old.hosts[0].ssh, old.hosts[0].python) == ("a", None, "python3")
    assert old.schedule[3].phase == "listen" and old.schedule[3].components == ["server"]
    assert old.schedule[3].release == "message" and old.clock.reference == "a"
    assert old.components[1].params == {"count": 2000, "size": 64} and old.analysis.pairs == {}
    assert released.schedule[2].release == "at" and released.components[0].program.endswith("actor.py")
    assert read_run(RELEASED).host_names == ["h0", "h1", "h2"]


def test_a_plan_key_of_the_wrong_type_is_refused_naming_where_it_is(tmp_path):
    stored = json.loads((FORMATS[1] / "run.json").read_text())
    stored["plan"]["schedule"][3]["components"] = "server"
    with pytest.raises(NetspecError, match=r"not a run record: .*\$\.plan\.schedule\[3\]\.components"):
        decode(json.dumps(stored).encode(), "bad/run.json")


def test_what_a_status_means_to_a_campaign_is_its_outcome_s_to_say():
    statuses = ("ok", "partial", "failed", "interrupted", "running", SETUP_FAILED)
    assert [s for s in statuses if RunOutcome(s).counts_as_failed] == ["partial", "failed", SETUP_FAILED]
    assert [s for s in statuses if RunOutcome(s).interrupted] == ["interrupted"]
    assert [s for s in statuses if RunOutcome(s).running] == ["running"]


def test_a_second_salvage_keeps_what_it_found_left_when_it_reached_the_host_and_a_removal_done():
    first = Salvage("sftp", "/run", ["a/stdout"], 10, left=["streams/b.ds"], error="streams/b.ds: reset")
    gathered = Salvage("sftp", "/run", ["a/stdout", "streams/b.ds"], 5, removed=True)
    kept = gathered.after(first)  # the second gathered what the first left, and removed the copy
    assert (kept.files, kept.bytes, kept.left, kept.removed, kept.error) == (
        ["a/stdout", "streams/b.ds"], 15, [], True, "")
    unreached = Salvage("", error="salvage failed: no route to host").after(kept)
    assert (unreached.via, unreached.left, unreached.removed) == ("sftp", [], True)
    unreached = Salvage("", error="salvage failed: no route to host").after(first)
    assert unreached.left == ["streams/b.ds"]  # as the one that reached the host found them
    # Left by one that removed the host's copy: gone for good, and said so after a later one.
    removing = Salvage("sftp", "/run", ["a/stdout"], 10, left=["a/work/a.log"], removed=True)
    assert Salvage("sftp", "/run").after(removing).left == ["a/work/a.log"]
