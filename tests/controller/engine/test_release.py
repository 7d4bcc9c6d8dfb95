"""`release: at`: every host starts a step at one instant of the reference clock, and every
step reports its release skew on the global timeline."""

import json
import os
import re
from pathlib import Path

import msgspec
import pytest
from netspec.controller.engine.release import skew, skew_text
from netspec.controller.engine.summary import run_lines, seconds
from netspec.controller.experiment.load import load
from netspec.protocol.errors import ConfigError
from netspec.protocol.runrecord import Release, Step, decode, read_run
from netspec.web import timeline
from support import PROGRAMS, latest_record, ns_control

THREE_HOSTS = """\
experiment: release
hosts: {a: {}, b: {}, c: {}}
components:
  one: {host: a, program: ACTOR, args: ["launch,work,rest,collect"]}
  two: {host: b, program: ACTOR, args: ["launch,work,rest,collect"]}
  three: {host: c, program: ACTOR, args: ["launch,work,rest,collect"]}
schedule:
  - launch
  - sync_clocks
  - {phase: work, release: at}
  - rest
  - collect
"""


def test_a_step_released_at_an_instant_starts_every_host_then_and_each_step_reports_its_skew(
        experiment, tmp_path):
    done = ns_control("run", "--no-merge", str(experiment(THREE_HOSTS)), "--runs", str(tmp_path / "runs"),
                      cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = latest_record(tmp_path / "runs")
    steps = {s["phase"]: s for s in record["steps"]}
    at, message = steps["work"]["release"], steps["rest"]["release"]
    assert at["mode"] == "at" and message["mode"] == "message"
    typed = {s.phase: s.release for s in read_run(tmp_path / "runs" / "latest").steps}
    instant = at["instant_ns"]
    # The daemons share this machine's clock, so the truth is their own stamps: each took
    # the instant on its clock within the bound of the estimate it had then, and began the
    # phase at that instant or after it.
    for host, entry in steps["work"]["hosts"].items():
        for name, info in entry["components"].items():
            assert abs(info["release_at_ns"] - instant) <= info["release_bound_ns"], (host, name, info)
            assert info["entered_ns"] >= info["release_at_ns"], (host, name)
            assert "release_missed_ns" not in info, (host, name)
            if os.geteuid() == 0:  # root may take real-time priority for the wake-up
                assert "release_realtime_refused" not in info, (host, name)
    for said, step in ((at, steps["work"]), (message, steps["rest"])):
        assert said["starts"] == 3 and not said["unplaced"]
        infos = [info for e in step["hosts"].values() for info in e["components"].values()]
        truth = [info["entered_ns"] for info in infos]
        # The bound covers the true spread, and the reported spread is within it.
        assert max(truth) - min(truth) <= said["at_most_ns"]
        assert said["skew_ns"] <= said["at_most_ns"]
        # Where the participants start: each program's callback, as it stamped it in its ack
        # (one clock here: the stamps are the truth), after its daemon handed it the step.
        program, started = said["program"], [info["started_ns"] for info in infos]
        assert program["starts"] == 3 and all(i["started_ns"] >= i["entered_ns"] for i in infos)
        slack = sum(sorted(info["start_bound_ns"] for info in infos)[-2:])  # the two widest estimates
        assert abs(program["skew_ns"] - (max(started) - min(started))) <= slack, (program, started)
        assert max(started) - min(started) <= program["at_most_ns"]
    # At an instant the daemons' own spread is the release's alone (tens of us), the
    # programs' adds each one's way to its callback. (Released by message, each daemon's
    # start and its program's delay may cancel: neither figure bounds the other.)
    assert at["program"]["skew_ns"] >= at["skew_ns"], at
    assert re.search(r"\[\d+ ms; at release skew \d.* at the programs \(at most .*\), .* at the daemons "
                     r"\(at most .*\)\]", done.stdout), done.stdout
    assert "message release skew" in done.stdout
    # `show`: the programs' skew in the step's column, both figures beneath.
    shown = run_lines(tmp_path / "runs" / "latest", read_run(tmp_path / "runs" / "latest"))
    work = shown.index(next(line for line in shown if line.startswith("  work (at) ")))
    assert f" {seconds(at['program']['skew_ns'] / 1e9)}  " in shown[work], shown[work]
    assert shown[work + 1].strip() == skew_text(typed["work"]), shown
    # Each host's time in the step counts from the release instant, not from the step's
    # sending a lead before it: the same live and in `show`.
    live = next(line for line in done.stdout.splitlines() if line.startswith("  work "))
    for host, entry in steps["work"]["hosts"].items():
        took = seconds((entry["done_ns"] - at["instant_controller_ns"]) / 1e9)
        assert f"{host} ok {took}" in shown[work] and f" {host} ok {took} " in live, (took, shown[work], live)
    assert at["instant_controller_ns"] - steps["work"]["hosts"]["a"]["sent_ns"] > 0.5 * at["lead_s"] * 1e9


def test_release_at_before_the_clocks_are_in_sync_and_a_lead_without_it_are_errors(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(THREE_HOSTS.replace("ACTOR", str(PROGRAMS / "actor.py")).replace(
        "  - sync_clocks\n", "").replace("  - rest\n", "  - {phase: rest, lead: 20ms}\n"))
    with pytest.raises(ConfigError) as caught:
        load(path)
    text = str(caught.value)
    assert "exp.yaml:9: schedule[1].release: 'release: at' takes an instant on the reference clock" in text
    assert "exp.yaml:10: schedule[2].lead: 'lead' is how far ahead" in text


def test_the_skew_is_the_spread_of_the_placed_starts_and_says_what_it_could_not_place():
    def entry(start, bound, **more):
        return {"entered_ns": start + 7, "start_ns": start, "start_bound_ns": bound, **more}
    step = msgspec.convert({"phase": "work", "status": "ok", "release": {"mode": "at"}, "hosts": {
        "a": {"components": {"x": entry(1_000_000, 10_000, program_start_ns=3_200_000),
                             "netspecd": entry(1_010_000, 10_000)}},  # a daemon's own part: no program
        "b": {"components": {"y": entry(1_250_000, 30_000, release_missed_ns=4_000_000,
                                        release_realtime_refused=True, program_start_ns=1_300_000)}},
        "c": {"components": {"z": {"entered_ns": 5}, "gone": {"outcome": "skipped"}}}}}, Step)
    said = skew(step)
    assert said == msgspec.convert({
                    "mode": "at", "starts": 3, "unplaced": ["c/z"], "missed_ns": {"b/y": 4_000_000},
                    "realtime_refused": ["b/y"],
                    "skew_ns": 250_000, "first": "a/x", "last": "b/y", "at_most_ns": 290_000,
                    "program": {"starts": 2, "skew_ns": 1_900_000, "first": "b/y", "last": "a/x",
                                "at_most_ns": 1_940_000}}, Release)
    assert skew_text(said) == (
        "at release skew 1.9 ms at the programs (at most 1.9 ms), 250 us at the daemons (at most 290 us); "
        "1 participant(s) got the step after its instant (latest by 4.0 ms: b/y); 1 start(s) without a "
        "clock estimate, left out of the skew: c/z; 1 woke without real-time priority (refused)")
    assert msgspec.json.decode(msgspec.json.encode(said), type=Release) == said


def test_a_steps_release_troubles_are_the_same_words_in_show_and_in_the_browser():
    # Late for the instant, starts without a clock estimate, an instant taken on a host's own
    # clock, a wake-up refused real-time priority: one reading (Release.troubles) for both.
    steps = [{"phase": "work", "status": "ok", "release": {
                 "mode": "at", "instant_ns": 10, "starts": 3, "skew_ns": 4000, "first": "a/x", "last": "b/y",
                 "at_most_ns": 9000, "unplaced": ["c/z"], "missed_ns": {"b/y": 2_500_000, "d/w": 100_000},
                 "unsynchronised": ["d/w"]}},
             {"phase": "rest", "status": "ok", "release": {
                 "mode": "message", "starts": 4, "skew_ns": 5000, "first": "a/x", "last": "b/y",
                 "at_most_ns": 7000, "unplaced": ["c/z"], "realtime_refused": ["a/x"]}}]
    record = decode(json.dumps({"format": 1, "id": "r", "experiment": "e", "status": "ok",
                                "steps": steps}).encode(), "run.json")
    troubles = [step.release.troubles() for step in record.steps]
    assert [len(t) for t in troubles] == [3, 2]
    assert troubles[0][0] == "2 participant(s) got the step after its instant (latest by 2.5 ms: b/y, d/w)"
    shown = run_lines(Path("r"), record)
    rows = timeline.step_rows(record)
    for step, said, row in zip(record.steps, troubles, rows, strict=True):
        under = shown[shown.index(next(line for line in shown if line.startswith(f"  {step.phase} "))) + 1]
        assert under.strip().endswith("; ".join(said)), under
        assert row["troubles"] == "; ".join(said), row
