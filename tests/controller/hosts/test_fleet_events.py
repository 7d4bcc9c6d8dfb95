"""The controller's DaemonClient takes nothing a daemon sends unchecked (protocol/kinds.py
checks each event's shape, tests/protocol/test_events.py): over a real authenticated
connection, a malformed event drops the daemon naming what it sent, and a reply without what
the controller reads of it is refused naming the host."""

import asyncio
import os

import pytest
from netspec.controller.gather.fetch import fetch_host
from netspec.controller.hosts.fleet import DaemonClient, Lost
from netspec.controller.record.rundir import RunDir
from netspec.protocol import events, reading
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.auth import client_handshake, server_handshake
from netspec.protocol.channel import Channel
from netspec.protocol.errors import ProtocolError
from netspec.protocol.hostfacts import HostFacts
from netspec.protocol.wire import packed


def _read(event):
    """An event as the controller reads it off the wire: typed, or refused naming the field."""
    return events.FROM_DAEMON(packed(event))


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
    assert hello == k.HelloReply(id=1, pid=1, protocol=5, facts=HostFacts())
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
