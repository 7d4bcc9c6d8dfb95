"""The controller takes nothing a daemon sends unchecked: every event's shape where it is
read (protocol/kinds.py), and which host runs which component in the engine."""

import asyncio
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from netspec.controller.engine.run import Run
from netspec.controller.experiment.load import parse
from netspec.controller.gather.fetch import fetch_host
from netspec.controller.hosts.fleet import DaemonClient, Lost
from netspec.controller.record.rundir import RunDir
from netspec.protocol import events, reading
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.auth import client_handshake, server_handshake
from netspec.protocol.channel import Channel
from netspec.protocol.errors import ProtocolError
from netspec.protocol.runrecord import Clock, HostRecord, Step, StepHost
from netspec.protocol.wire import packed

ACK = {"t": m.ACK, "step": 2, "component": "c", "status": m.ACK_OK, "entered": 1, "acked": 2}
# What msgpack can carry: the values a daemon could put in an event.
WIRE = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats()
                    | st.text(max_size=8) | st.binary(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4), max_leaves=12)
FIELDS = st.sampled_from(sorted({*k.Ack.__struct_fields__, *k.Exit.__struct_fields__, "t", "stream", "data",
                                 "error", "acks", "host", "summary",
                                 *(f for r in k.REPLIES.values() for f in r.__struct_fields__)}))


def _read(event):
    """An event as the controller reads it off the wire: typed, or refused naming the field."""
    return events.FROM_DAEMON(packed(event))


def _refused(event) -> str:
    read = _read(event)
    assert type(read) is reading.Refused, read
    return read.problem


def test_each_kind_of_event_is_taken_only_with_its_fields_of_their_types():
    assert _read(ACK) == k.Ack(step=2, component="c", status=m.ACK_OK, entered=1, acked=2)
    assert _read({**ACK, "entry_clock": [5, 6], "phases": ["a"], "published": {"k": 1}}).entry_clock == (5, 6)
    assert _refused({**ACK, "status": "fine"}) == ("event 'ack' does not fit: Invalid enum value 'fine' - "
                                                   "at `$.status`")
    assert _refused({**ACK, "step": -1}) == "event 'ack' does not fit: Expected `int` >= 0 - at `$.step`"
    assert _refused({**ACK, "entered": "1"}) == ("event 'ack' does not fit: Expected `int`, got `str` - "
                                                 "at `$.entered`")
    assert _refused({"t": m.ACK, "step": 0}) == ("event 'ack' does not fit: Object missing required field "
                                                 "`status`")
    assert type(_read({"t": m.OUTPUT, "component": "c", "stream": "stdout", "data": b"x"})) is k.Output
    for stream in ("../../etc/passwd", "stdin", b"stdout"):
        assert "at `$.stream`" in _refused({"t": m.OUTPUT, "component": "c", "stream": stream, "data": b"x"})
    assert type(_read({"t": m.EXIT, "component": "c", "returncode": 0, "duration_s": 0.5, "argv": ["x"],
                       "ended_ns": 1, "failed": False})) is k.Exit
    assert _refused({"t": m.EXIT, "component": "c"}) == ("event 'exit' does not fit: Object missing required "
                                                         "field `returncode`")
    assert _refused({"t": m.ERROR, "error": "boom"}) == ("event 'error' does not fit: Expected `object`, got "
                                                         "`str` - at `$.error`")
    assert _read({"t": m.ACKS, "step": 2, "acks": [{**ACK, "host": "h"}]}).acks[0].host == "h"
    assert _refused({"t": m.ACKS, "step": 2, "acks": [["h"]]}) == ("event 'acks' does not fit: Expected "
                                                                   "`object`, got `array` - at `$.acks[0]`")
    assert _refused({"t": "lost", "error": "x"}) == "unknown event type 'lost'"
    with pytest.raises(ProtocolError, match="not a message map with a string 't'"):
        _read({"t": 5})


@settings(max_examples=400, deadline=None, derandomize=True)
@given(kind=st.sampled_from([m.ACK, m.ACKS, m.OUTPUT, m.EXIT, m.ERROR, m.REPLY, "x"]),
       fields=st.dictionaries(FIELDS, WIRE, max_size=8))
def test_no_event_from_the_wire_breaks_the_reading_and_what_it_takes_has_its_shape(kind, fields):
    read = _read({**fields, "t": kind})  # never raises: a map with a text "t" is typed or refused
    if type(read) is k.Output:
        assert read.stream in ("stdout", "stderr") and isinstance(read.data, bytes)
    if type(read) in (k.Ack, k.Acks):
        for ack in [read] if type(read) is k.Ack else read.acks:
            assert type(ack.step) is int and ack.step >= 0 and isinstance(ack.component, str)
    if type(read) is reading.Refused:
        assert read.problem.startswith((f"event {kind!r} does not fit: ", "unknown event type"))


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
            channel = await Channel.connect("127.0.0.1", server.sockets[0].getsockname()[1], "host a",
                                            kinds=events.FROM_DAEMON)
            await client_handshake(channel, key)
            async with DaemonClient("a", channel, lambda host, event: got.append((host, event))) as client:
                serving = tg.create_task(client.serve())
                said = await asyncio.wait_for(then(client), 10)
            await serving
    return said, got


@settings(max_examples=300, deadline=None, derandomize=True)
@given(kind=st.sampled_from(sorted(k.REPLIES)), size=st.integers(0, 1 << 23),
       fields=st.dictionaries(FIELDS, WIRE, max_size=8))
def test_no_reply_from_the_wire_breaks_the_reading_and_a_read_it_takes_makes_progress(kind, size, fields):
    frame = _read({**fields, "t": m.REPLY, "id": 1})
    if type(frame) is not k.ReplyFrame:
        return
    try:
        reply = reading.reply(kind, frame)  # raises nothing else
    except ProtocolError:
        return
    if kind == m.READ and events.read_problem(size, reply) is None:
        assert len(reply.data) <= size and (reply.data or reply.eof is True)


def test_a_daemon_that_sends_a_malformed_event_is_dropped_naming_what_it_sent():
    async def controller(client):
        client.notify(m.HELLO)
        while client.lost is None:
            await asyncio.sleep(0.01)

    _, got = asyncio.run(_talk(lambda request: [{"t": m.OUTPUT, "component": "c", "stream": "../../x",
                                                 "data": b"x"}], controller))
    [(host, event)] = got
    assert host == "a" and isinstance(event, Lost)
    assert str(event.error) == ("host a: connection lost (dropped: it sent event 'output' does not fit: "
                                "Invalid enum value '../../x' - at `$.stream`)")


def test_a_reply_without_what_the_controller_reads_of_it_is_refused_naming_the_host():
    def reply(kind, fields):
        return reading.reply(kind, _read({"t": m.REPLY, "id": 1, **fields}))
    hello = reply(m.HELLO, {"pid": 1, "protocol": 5, "facts": {}})
    assert hello == k.HelloReply(id=1, pid=1, protocol=5, facts={})
    assert events.read_problem(10, reply(m.READ, {"data": b"", "eof": False})) == (
        "a reply to read of 0 bytes (eof False) for 10 asked")  # the controller would read for ever
    assert events.read_problem(10, reply(m.READ, {"data": b"x" * 11, "eof": True})).startswith(
        "a reply to read of 11 bytes")
    with pytest.raises(ProtocolError, match=r"a reply to files that does not fit: .* `\$\.files\[0\]\.name`"):
        reply(m.FILES, {"files": [{"component": None, "name": 1}]})

    async def controller(client):
        with pytest.raises(ProtocolError) as caught:
            await client.request(m.HELLO, asyncio.get_running_loop().time() + 5)
        return str(caught.value)

    said, _ = asyncio.run(_talk(lambda r: [{"t": m.REPLY, "id": r["id"], "pid": 1, "protocol": 5,
                                            "facts": "x"}], controller))
    assert said == ("host a: it sent a reply to hello that does not fit: Expected `object`, got `str` - "
                    "at `$.facts`")


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
        run.failure.open()
        run.inbox.on_event(host, _read(event))
        assert not (rundir.path / "hosts").exists()  # nothing written for it
        return str(run.failure.exception())

    output = {"t": m.OUTPUT, "component": "two", "stream": "stdout", "data": b"x"}
    assert asyncio.run(failure("a", output)) == "host a: an event of component 'two', which it does not run"
    assert asyncio.run(failure("a", {**ACK, "component": "one"})) == ("host a: an ack of step 2, which was "
                                                                      "never sent")


def test_a_clock_estimate_that_is_not_one_is_refused_where_it_is_read_naming_the_field(tmp_path):
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
    for bad, field in (({**good, "offset_ns": "soon"}, "Expected `int`, got `str` - at `$.clock.offset_ns`"),
                       ({**good, "source": None}, "Expected `str`, got `None` - at `$.clock.source`"),
                       ([1, 2, 3, 4], "Expected `object | null`, got `array` - at `$.clock`")):
        said = _refused({**ACK, "step": 0, "component": m.NODE, "clock": bad})
        assert said == f"event 'ack' does not fit: {field}"


def test_an_error_whose_fields_are_of_the_wrong_type_is_refused_where_it_is_read_naming_the_field():
    error = {"type": "OSError", "message": "disk full", "traceback": "...", "host": "a", "phase": "work"}
    assert _read({"t": m.ERROR, "error": error, "id": 3}) == k.ErrorEvent(error=k.WireError(**error), id=3)
    assert _read({"t": m.ERROR, "error": {}}).error == k.WireError()
    for field, value in (("type", 5), ("message", ["x"]), ("traceback", b"x"), ("host", 1), ("phase", {})):
        assert f"at `$.error.{field}`" in _refused({"t": m.ERROR, "error": {**error, field: value}})
