"""The controller takes nothing a daemon sends unchecked: every event's shape at the wire
(protocol/events.py), and which host runs which component in the engine."""

import asyncio
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from netspec.controller.engine.run import Run
from netspec.controller.experiment.load import parse
from netspec.controller.gather.fetch import fetch_host
from netspec.controller.hosts.fleet import DaemonClient
from netspec.controller.record.rundir import RunDir
from netspec.protocol import events
from netspec.protocol import messages as m
from netspec.protocol.auth import client_handshake, server_handshake
from netspec.protocol.channel import Channel
from netspec.protocol.errors import ProtocolError
from netspec.protocol.runrecord import Clock, HostRecord, Step, StepHost

ACK = {"t": m.ACK, "step": 2, "component": "c", "status": m.ACK_OK, "entered": 1, "acked": 2}
# What msgpack can carry: the values a daemon could put in an event.
WIRE = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats()
                    | st.text(max_size=8) | st.binary(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4), max_leaves=12)
FIELDS = st.sampled_from(sorted({*events.ACK_FIELDS, *events.EXIT_FIELDS, "t", "stream", "data", "error",
                                 "acks", "host", *(k for f in events.REPLY_FIELDS.values() for k in f)}))


def test_each_kind_of_event_is_taken_only_with_its_fields_of_their_types():
    assert events.problem(ACK) is None
    assert events.problem({**ACK, "entry_clock": [5, 6], "phases": ["a"], "published": {"k": 1}}) is None
    assert events.problem({**ACK, "status": "fine"}) == "an ack whose status is malformed"
    assert events.problem({**ACK, "step": -1, "entered": "1"}) == ("an ack whose step and entered are "
                                                                   "malformed")
    assert events.problem({"t": m.ACK, "step": 0}) == "an ack without component, status, entered, acked"
    assert events.problem({"t": m.OUTPUT, "component": "c", "stream": "stdout", "data": b"x"}) is None
    for stream in ("../../etc/passwd", "stdin", b"stdout"):
        assert "an output event that is not component, stream" in events.problem(
            {"t": m.OUTPUT, "component": "c", "stream": stream, "data": b"x"})
    assert events.problem({"t": m.EXIT, "component": "c", "returncode": 0, "duration_s": 0.5, "argv": ["x"],
                           "ended_ns": 1, "failed": False}) is None
    assert events.problem({"t": m.EXIT, "component": "c"}).startswith("an exit event whose returncode and")
    assert events.problem({"t": m.ERROR, "error": "boom"}) == ("an error event without an error map of type "
                                                               "and message")
    assert events.problem({"t": m.ACKS, "step": 2, "acks": [{**ACK, "host": "h"}]}) is None
    assert events.problem({"t": m.ACKS, "step": 2, "acks": [["h"]]}) == ("a batch with an ack that is not "
                                                                         "a map")
    assert events.problem({"t": "lost", "error": "x"}) == "an event of unknown kind 'lost'"


@settings(max_examples=400, deadline=None, derandomize=True)
@given(kind=st.sampled_from([m.ACK, m.ACKS, m.OUTPUT, m.EXIT, m.ERROR, "x"]),
       fields=st.dictionaries(FIELDS, WIRE, max_size=8))
def test_no_event_from_the_wire_breaks_the_check_and_what_it_takes_has_its_shape(kind, fields):
    event = {**fields, "t": kind}
    wrong = events.problem(event)  # never raises
    if wrong is None and kind == m.OUTPUT:
        assert event["stream"] in events.STREAMS and isinstance(event["data"], bytes)
    if wrong is None and kind in (m.ACK, m.ACKS):
        for ack in [event] if kind == m.ACK else event["acks"]:
            assert isinstance(ack["step"], int) and ack["step"] >= 0 and isinstance(ack["component"], str)


async def _talk(answer, then):
    """A daemon of this test's own over a real authenticated connection: it answers each
    request with `answer(request)` (a list of frames to send); `then(client)` is the
    controller's side."""
    key, got = os.urandom(32), []

    async def daemon(channel):
        await server_handshake(channel, key)
        while (request := await channel.recv()) is not None:  # spoken to once its handshake is done
            for frame in answer(request):
                channel.send(frame)

    async with asyncio.TaskGroup() as tg:
        server = await Channel.serve(daemon, "127.0.0.1", 0, tg)
        async with server:
            channel = await Channel.connect("127.0.0.1", server.sockets[0].getsockname()[1], "host a")
            await client_handshake(channel, key)
            async with DaemonClient("a", channel, lambda host, event: got.append((host, event))) as client:
                serving = tg.create_task(client.serve())
                said = await asyncio.wait_for(then(client), 10)
            await serving
    return said, got


@settings(max_examples=300, deadline=None, derandomize=True)
@given(kind=st.sampled_from(sorted(events.REPLY_FIELDS)), size=st.integers(0, 1 << 23),
       fields=st.dictionaries(FIELDS, WIRE, max_size=8))
def test_no_reply_from_the_wire_breaks_the_check_and_a_read_it_takes_makes_progress(kind, size, fields):
    wrong = events.reply_problem({"t": kind, "size": size}, fields)  # never raises
    if wrong is None and kind == m.READ:
        assert len(fields["data"]) <= size and (fields["data"] or fields["eof"] is True)


def test_a_daemon_that_sends_a_malformed_event_is_dropped_naming_what_it_sent():
    async def controller(client):
        client.notify(m.HELLO)
        while client.lost is None:
            await asyncio.sleep(0.01)

    _, got = asyncio.run(_talk(lambda request: [{"t": m.OUTPUT, "component": "c", "stream": "../../x",
                                                 "data": b"x"}], controller))
    [(host, event)] = got
    assert host == "a" and event["t"] == "lost"
    assert str(event["error"]) == ("host a: connection lost (dropped: it sent an output event that is not "
                                   "component, stream (stdout or stderr) and data (bytes))")


def test_a_reply_without_what_the_controller_reads_of_it_is_refused_naming_the_host():
    assert events.reply_problem({"t": m.HELLO}, {"pid": 1, "protocol": 5, "facts": {}}) is None
    assert events.reply_problem({"t": m.READ, "size": 10}, {"data": b"", "eof": False}) == (
        "a reply to read of 0 bytes (eof False) for 10 asked")  # the controller would read for ever
    assert events.reply_problem({"t": m.READ, "size": 10}, {"data": b"x" * 11, "eof": True}).startswith(
        "a reply to read of 11 bytes")
    assert events.reply_problem({"t": m.FILES}, {"files": [{"component": None, "name": 1}]}) == (
        "a reply to files whose files is missing or malformed")

    async def controller(client):
        with pytest.raises(ProtocolError) as caught:
            await client.request(m.HELLO, asyncio.get_running_loop().time() + 5)
        return str(caught.value)

    said, _ = asyncio.run(_talk(lambda r: [{"t": m.REPLY, "id": r["id"], "pid": 1, "protocol": 5,
                                            "facts": "x"}], controller))
    assert said == "host a: it sent a reply to hello whose facts is missing or malformed"


def test_a_listing_that_names_a_component_the_host_does_not_run_is_refused_before_anything_is_written(
        tmp_path):
    listing = {"files": [{"component": "other", "name": "out", "path": "/etc/hostname", "size": 3}]}
    run = RunDir.create(tmp_path / "runs", "x", "x: 1\n")

    async def controller(client):
        with pytest.raises(ProtocolError) as caught:
            await fetch_host(client, run, asyncio.get_running_loop().time() + 5, {"mine"})
        return str(caught.value)

    said, _ = asyncio.run(_talk(lambda r: [{"t": m.REPLY, "id": r["id"], **listing}], controller))
    assert said == "host a: its files name components ['other'], which it does not run"
    assert not (run.path / "hosts").exists()


def test_an_event_naming_a_component_its_host_does_not_run_or_a_step_never_sent_fails_the_run(tmp_path):
    text = ("experiment: strangers\nhosts: {a: {}, b: {}}\ncomponents:\n"
            "  one: {host: a, command: [sleep, '1']}\n  two: {host: b, command: [sleep, '1']}\n"
            "schedule: [start_logging]\n")

    async def failure(host, event):
        plan = parse(text, tmp_path / "strangers.yaml")
        rundir = RunDir.create(tmp_path / "runs", plan.name, plan.text)
        run = Run(plan, rundir, os.urandom(32), lambda progress: None)
        run.failure = asyncio.get_running_loop().create_future()
        run._on_event(host, event)
        assert not (rundir.path / "hosts").exists()  # nothing written for it
        return str(run.failure.exception())

    output = {"t": m.OUTPUT, "component": "two", "stream": "stdout", "data": b"x"}
    assert asyncio.run(failure("a", output)) == "host a: an event of component 'two', which it does not run"
    assert asyncio.run(failure("a", {**ACK, "component": "one"})) == ("host a: an ack of step 2, which was "
                                                                      "never sent")


def test_a_clock_estimate_that_is_not_one_fails_the_run_naming_its_host_and_is_never_recorded(tmp_path):
    text = ("experiment: clocks\nhosts: {a: {}, b: {}}\n"
            "components:\n  one: {host: a, command: [sleep, '1']}\nschedule: [sync_clocks]\n")

    async def told(clock):
        plan = parse(text, tmp_path / "clocks.yaml")
        rundir = RunDir.create(tmp_path / "runs", plan.name, plan.text,
                               hosts={"a": HostRecord("127.0.0.1:1", 1)},
                               steps=[Step("sync_clocks", "running", hosts={"a": StepHost(components={})})])
        run = Run(plan, rundir, os.urandom(32), lambda progress: None)
        run.failure = asyncio.get_running_loop().create_future()
        run._on_event("a", {**ACK, "step": 0, "component": m.NODE, "clock": clock})
        failed = run.failure.exception() if run.failure.done() else None
        return str(failed) if failed else None, rundir.record.hosts["a"].clock

    good = {"offset_ns": -61, "bound_ns": 812, "exchanges": 21, "source": "kernel"}
    assert asyncio.run(told(good)) == (None, Clock(-61, 812, 21, "kernel"))
    said, kept = asyncio.run(told({**good, "offset_ns": "soon"}))
    assert said == "host a: a clock estimate that is not one (Expected `int`, got `str` - at `$.offset_ns`)"
    assert kept is None
