"""The run engine's check of who sent an event (controller/engine/events.py's `stranger`): a pure
check that says what it found; the run fails only where the engine decides it
(tests/controller/hosts/test_events.py runs that through a Run)."""

import asyncio
import os

from netspec.controller.engine.events import stranger
from netspec.controller.engine.run import Run
from netspec.controller.experiment.load import parse
from netspec.controller.record.results import ComponentResult
from netspec.controller.record.rundir import RunDir
from netspec.protocol import kinds as k
from netspec.protocol import messages as m

RESULTS = {"one": ComponentResult("a", "one", ["true"]), "two": ComponentResult("b", "two", ["true"])}


def said(error: object) -> str | None:
    return None if error is None else str(error)


def test_an_event_is_its_hosts_when_the_host_runs_its_component_and_its_step_was_sent():
    assert stranger("a", "one", None, RESULTS, 0) is None
    assert stranger("b", "two", 2, RESULTS, 3) is None
    assert stranger("a", m.NODE, 0, RESULTS, 1) is None  # the node acks a step of its own


def test_an_event_of_a_component_its_host_does_not_run_is_said_naming_the_host():
    def not_run(host, name):
        return f"host {host}: an event of component '{name}', which it does not run"
    assert said(stranger("a", "two", None, RESULTS, 3)) == not_run("a", "two")
    assert said(stranger("c", "nobody", 0, RESULTS, 3)) == not_run("c", "nobody")
    # The node's events name a step; one without is no event of the node's.
    assert said(stranger("a", m.NODE, None, RESULTS, 3)) == not_run("a", m.NODE)


def test_an_event_of_a_step_never_sent_is_said_naming_the_host():
    assert said(stranger("a", "one", 3, RESULTS, 3)) == "host a: an ack of step 3, which was never sent"
    assert said(stranger("b", m.NODE, 0, RESULTS, 0)) == "host b: an ack of step 0, which was never sent"


def test_asking_whether_a_strangers_event_is_one_leaves_the_run_as_it_was(tmp_path):
    text = ("experiment: strangers\nhosts: {a: {}, b: {}}\ncomponents:\n"
            "  one: {host: a, command: [sleep, '1']}\n  two: {host: b, command: [sleep, '1']}\n"
            "schedule: [start_logging]\n")

    async def ask():
        plan = parse(text, tmp_path / "strangers.yaml")
        rundir = RunDir.create(tmp_path / "runs", plan.name, plan.text)
        run = Run(plan, rundir, os.urandom(32), lambda progress: None)
        run.failure.open()
        found = run.inbox.stranger("a", k.Output(component="two", stream="stdout", data=b"x"))
        return found, run.failure.done()
    found, failed = asyncio.run(ask())
    assert said(found) == "host a: an event of component 'two', which it does not run"
    assert not failed  # the engine's Inbox.on_event fails the run with it, not the check
