"""`release: at`: every host starts a step at one instant of the reference clock, and every
step reports its release skew on the global timeline."""

import json
import os

import pytest
from netspec.controller.load import load
from netspec.controller.release import skew, skew_text
from netspec.protocol.errors import ConfigError
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
    for said in (at, message):
        assert said["starts"] == 3 and "unplaced" not in said
        truth = [info["entered_ns"] for s in (steps["work"] if said is at else steps["rest"],)
                 for e in s["hosts"].values() for info in e["components"].values()]
        # The bound covers the true spread, and the reported spread is within it.
        assert max(truth) - min(truth) <= said["at_most_ns"]
        assert said["skew_ns"] <= said["at_most_ns"]
    assert "at release skew " in done.stdout
    assert "message release skew" in done.stdout


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
    step = {"release": {"mode": "at"}, "hosts": {
        "a": {"components": {"x": entry(1_000_000, 10_000)}},
        "b": {"components": {"y": entry(1_250_000, 30_000, release_missed_ns=4_000_000,
                                        release_realtime_refused=True)}},
        "c": {"components": {"z": {"entered_ns": 5}, "gone": {"outcome": "skipped"}}}}}
    said = skew(step)
    assert said == {"mode": "at", "starts": 2, "unplaced": ["c/z"], "missed_ns": {"b/y": 4_000_000},
                    "realtime_refused": ["b/y"],
                    "skew_ns": 250_000, "first": "a/x", "last": "b/y", "at_most_ns": 290_000}
    assert skew_text(said) == ("at release skew 250 us (at most 290 us); 1 participant(s) got the step "
                               "after its instant (latest by 4.0 ms); 1 start(s) without a clock estimate; "
                               "1 woke without real-time priority (refused)")
    assert json.dumps(said)
