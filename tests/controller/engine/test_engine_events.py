"""The run engine's check of who sent an event (controller/engine/events.py's `stranger`): a pure
check that says what it found; the run fails only where the engine decides it (the last tests
here run that through a Run), as it does for a clock estimate that is not one."""

import asyncio
import os

import pytest
from netspec.controller.engine.barrier import Barrier
from netspec.controller.engine.events import stranger
from netspec.controller.engine.run import Run
from netspec.controller.experiment.load import parse
from netspec.controller.record.results import ComponentResult
from netspec.controller.record.rundir import RunDir
from netspec.protocol import events
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.runrecord import Clock, HostRecord, Step, StepHost
from netspec.protocol.wire import packed
from support import PROGRAMS

ACK = {"t": m.ACK, "step": 2, "component": "c", "status": m.ACK_OK, "entered": 1, "acked": 2}
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


def _read(event):
    """An event as the controller reads it off the wire: typed, or refused naming the field."""
    return events.FROM_DAEMON(packed(event))


def test_an_event_naming_a_component_its_host_does_not_run_or_a_step_never_sent_fails_the_run(tmp_path):
    text = ("experiment: strangers\nhosts: {a: {}, b: {}}\ncomponents:\n"
            "  one: {host: a, command: [sleep, '1']}\n  two: {host: b, command: [sleep, '1']}\n"
            "schedule: [start_logging]\n")

    async def failure(host, event):
        plan = parse(text, tmp_path / "strangers.yaml")
        rundir = RunDir.create(tmp_path / "runs", plan.name, plan.text)
        run = Run(plan, rundir, os.urandom(32), lambda progress: None)
        run.failure.open()
        run.inbox.on_event(host, _read(event))
        assert not (rundir.path / "hosts").exists()  # nothing written for it
        return str(run.failure.exception())

    output = {"t": m.OUTPUT, "component": "two", "stream": "stdout", "data": b"x"}
    assert asyncio.run(failure("a", output)) == "host a: an event of component 'two', which it does not run"
    assert asyncio.run(failure("a", {**ACK, "component": "one"})) == ("host a: an ack of step 2, which was "
                                                                      "never sent")


def test_a_clock_estimate_an_ack_carries_is_kept_typed_in_its_hosts_record(tmp_path):
    text = ("experiment: clocks\nhosts: {a: {}, b: {}}\n"
            "components:\n  one: {host: a, command: [sleep, '1']}\nschedule: [sync_clocks]\n")

    async def told(clock):
        plan = parse(text, tmp_path / "clocks.yaml")
        rundir = RunDir.create(tmp_path / "runs", plan.name, plan.text,
                               hosts={"a": HostRecord("127.0.0.1:1", 1)},
                               steps=[Step("sync_clocks", "running", hosts={"a": StepHost(components={})})])
        run = Run(plan, rundir, os.urandom(32), lambda progress: None)
        run.failure.open()
        run.inbox.on_event("a", _read({**ACK, "step": 0, "component": m.NODE, "clock": clock}))
        failed = run.failure.exception()
        return str(failed) if failed else None, rundir.record.hosts["a"].clock

    good = {"offset_ns": -61, "bound_ns": 812, "exchanges": 21, "source": "kernel"}
    assert asyncio.run(told(good)) == (None, Clock(-61, 812, 21, "kernel"))


ACTOR = PROGRAMS / "actor.py"
RACE = ("experiment: race\nhosts: {a: {}, b: {}}\ncomponents:\n"
        f"  one: {{host: a, program: {ACTOR}, args: [launch,work,collect]}}\n"
        f"  two: {{host: b, program: {ACTOR}, args: [launch,work,collect]}}\n"
        "schedule: [launch, {phase: work, need: 1}, collect]\n")


def _exit_of_two(step):
    return _read({"t": m.EXIT, "component": "two", "returncode": 1, "argv": ["sleep"], "duration_s": 0.5,
                  "ended_ns": 1, "failed": True, "step": step})


async def _collect_after_work(tmp_path):
    """A run whose k-of-n step work (need: 1) got both its acks, `two`'s an error, which
    completed its barrier (no straggler followed), and whose collect has been entered, as
    Steps.step leaves them: the run, its record and collect's barrier."""
    plan = parse(RACE, tmp_path / "race.yaml")
    steps = [Step(phase, "running", entered_ns=1, hosts={}) for phase in ("launch", "work", "collect")]
    rundir = RunDir.create(tmp_path / "runs", plan.name, plan.text, steps=steps)
    run = Run(plan, rundir, os.urandom(32), lambda progress: None)
    run.failure.open()
    everyone = {"a": ["one"], "b": ["two"]}
    run.now.phase, work = "work", Barrier(1, plan.schedule[1], everyone)
    run.now.barrier = run.stragglers.kofn[1] = work  # Steps.step keeps every k-of-n step's barrier
    run.inbox.on_event("a", _read({**ACK, "step": 1, "component": "one"}))
    run.inbox.on_event("b", _read({**ACK, "step": 1, "component": "two", "status": m.ACK_ERROR,
                                   "message": "exited 1 and cannot take part in phase 'work'"}))
    assert work.complete.done()
    run.now.phase, collect = "collect", Barrier(2, plan.schedule[2], everyone)
    run.now.barrier = collect
    return run, rundir.record, collect


def _failure(run):
    return run.failure.exception() if run.failure.done() else None


@pytest.mark.parametrize("ended_in", [1, 2], ids=["in-work", "in-collect"])
def test_an_exit_read_after_the_next_step_was_entered_belongs_to_the_step_its_daemon_says_it_ended_in(
        tmp_path, ended_in):
    """The race of a k-of-n step, made to happen: `two`'s error ack of `work` (through a fan-out
    tree, beside its exit on its own connection) completes work's barrier, collect is entered,
    and only then is its exit read. Died in work, it fails there and the run goes on without it;
    died in collect (after it raised in work), it fails collect."""
    async def scenario():
        run, record, collect = await _collect_after_work(tmp_path)
        run.inbox.on_event("b", _exit_of_two(ended_in))
        return _failure(run), run.stragglers.ended, collect, record.steps[1].hosts["b"].components["two"]
    failed, ended, collect, entry = asyncio.run(scenario())
    if ended_in == 1:
        assert failed is None and ended == {"two": "ended in phase 'work': exited 1 after 0.5 s"}, failed
        assert entry.died and collect.count == 1  # collect waits for one alone
    else:
        assert str(failed).split("\n")[0] == "phase 'collect', host b: component 'two' exited 1 after 0.5 s"
        assert not entry.died


def test_an_error_ack_of_the_next_step_read_before_the_exit_is_judged_in_the_step_it_ended_in(tmp_path):
    """The other order of a fan-out tree's race: `two` died in work, collect is entered, and
    its error ack of collect (which says it had ended in work) comes up the tree before its
    exit is read on its own connection."""
    async def scenario():
        run, record, collect = await _collect_after_work(tmp_path)
        run.inbox.on_event("b", _read({**ACK, "step": 2, "component": "two", "status": m.ACK_ERROR,
                                       "message": "exited 1 and cannot take part in phase 'collect'",
                                       "ended_in": 1}))
        run.inbox.on_event("b", _exit_of_two(1))
        return _failure(run), collect, record.steps
    failed, collect, steps = asyncio.run(scenario())
    assert failed is None, failed
    assert steps[1].hosts["b"].components["two"].died and collect.count == 1
    assert steps[2].hosts["b"].components["two"].outcome == "skipped"
