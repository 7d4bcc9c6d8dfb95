"""The stateful protocol fuzz (tests/protofuzz.py) on a real netspecd, short and seeded, and
the sequences it found, each as a test of its own (issue 38)."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from netspec.protocol.auth import client_handshake
from netspec.protocol.channel import Channel
from netspec.protocol.errors import ProtocolError
from netspec.protocol.messages import PROTOCOL_VERSION
from netspec.protocol.wire import HEADER, decode_body, encode
from protoclient import HANG_S, Client, Daemon, Dropped, Hang, handshake_mac, refused
from protoflood import flood
from protofuzz import RUN_END_S, SPIN_SHARE, Fuzz
from support import session_run_id, wait_for


@pytest.fixture
def netspecd(key: bytes, netspec_home: Path, tmp_path: Path) -> Iterator[Daemon]:
    """A real netspecd whose fds, threads, processes and CPU the test can watch."""
    daemon = Daemon(tmp_path, netspec_home / "key")
    yield daemon
    daemon.stop()


def _setup(client: Client, run: str, components: list[dict] | None = None) -> dict:
    return client.ask("setup", {"run": run, "host": "h", "components": components or [], "camp": None})


def _enter(client: Client, phase: str, step: int, names: list[str]) -> dict:
    return client.ask("enter", {"phase": phase, "step": step, "deadline_s": 3, "published": {},
                                "components": [{"name": n, "params": {}} for n in names]})


SLEEPER = {"name": "sleeper", "argv": ["sleep", "60"], "stop": "collect"}


def _launched(client: Client, netspecd: Daemon, run: str) -> None:
    assert refused(_setup(client, run, [SLEEPER])) is None
    assert refused(_enter(client, "launch", 0, ["sleeper"])) is None
    wait_for(lambda: netspecd.run_processes(run), timeout=HANG_S, what=f"run {run}'s component to start")


def test_the_stateful_fuzz_finds_no_fault_in_a_short_seeded_run(netspecd, key):
    fuzz = Fuzz(netspecd, key, random.Random(6), session_run_id("sfz"), run_end_s=4)
    deadline = time.monotonic() + 15  # bounded: about 15 s with its warm-up and end, on two cores
    while fuzz.counts["actions"] < 150 and time.monotonic() < deadline:
        fuzz.step()
    fuzz.finish()
    assert not fuzz.findings, "\n".join(f.line() for f in fuzz.findings)
    assert fuzz.counts["actions"] >= 40, f"only {fuzz.counts['actions']} actions: it tried too little to tell"


def test_frames_written_with_the_auth_frame_are_not_executed_without_their_seal(netspecd, key):
    run = session_run_id("unsealed")
    frames = encode({"t": "setup", "id": 900, "run": run, "host": "h", "components": [], "camp": None})
    frames += encode({"t": "hello", "id": 901})
    try:
        client = Client(netspecd.port, key, extra=lambda _: frames)
        client.ask("reset", {"clean": False})  # taken after any setup before it
        answer = client.ask("files")
    except Dropped:
        return  # dropped: nothing of it was taken
    assert refused(answer) is not None  # no run is set up on this connection
    assert not {900, 901} & client.replies.keys()


def test_a_controller_takes_no_unsealed_frame_that_came_with_the_welcome(key):
    async def scenario() -> dict | None:
        async def impostor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            """A daemon's handshake, then a frame with no seal in the welcome's segment."""
            nonce_s = os.urandom(32)
            writer.write(encode({"t": "challenge", "nonce": nonce_s, "proto": PROTOCOL_VERSION}))
            (length,) = HEADER.unpack(await reader.readexactly(HEADER.size))
            auth = decode_body(await reader.readexactly(length))
            mac = handshake_mac(key, b"server", auth["nonce"], nonce_s)
            forged = {"t": "error", "error": {"type": "X", "message": "forged"}}
            writer.write(encode({"t": "welcome", "mac": mac}) + encode(forged))
            await reader.read()
            writer.close()
        server = await asyncio.start_server(impostor, "127.0.0.1", 0)
        async with server:
            channel = await Channel.connect("127.0.0.1", server.sockets[0].getsockname()[1])
            try:
                await client_handshake(channel, key)
                return await asyncio.wait_for(channel.recv(), HANG_S)
            except (ProtocolError, ConnectionError):
                return None  # refused: as good
            finally:
                await channel.close()
    assert asyncio.run(scenario()) is None


def test_sealed_frames_written_with_the_auth_frame_are_served(netspecd, key):
    def sealed(client: Client) -> bytes:
        client.next_id = 2
        return client.sealed({"t": "hello", "id": 1}) + client.sealed({"t": "hello", "id": 2})
    client = Client(netspecd.port, key, extra=sealed)
    client.wait({1, 2}, time.monotonic() + HANG_S)
    assert all(client.replies[i]["t"] == "reply" for i in (1, 2))
    client.close()


def test_connections_held_in_their_handshake_do_not_lock_a_controller_out(netspecd, key):
    figures = asyncio.run(flood(netspecd.port, key, idle=36, half_open=64, controllers=3, seconds=15))
    assert figures["refused"] == 0, figures["refusals"]
    assert figures["answered"] == 3


def test_a_session_that_joins_its_own_run_and_hangs_up_holds_nothing(netspecd, key):
    run = session_run_id("joined-own")
    client = Client(netspecd.port, key)
    _launched(client, netspecd, run)
    client.ask("join", {"run": run})
    client.close()
    wait_for(lambda: not netspecd.run_processes(run), timeout=RUN_END_S, what=f"run {run} to end")
    other = Client(netspecd.port, key)
    assert refused(_setup(other, run)) is None  # its id is free again
    other.close()


def test_another_session_cannot_end_a_run_by_joining_it(netspecd, key):
    run = session_run_id("joined-other")
    owner, other = Client(netspecd.port, key), Client(netspecd.port, key)
    _launched(owner, netspecd, run)
    (pid,) = [p.pid for p in netspecd.run_processes(run)]
    other.ask("join", {"run": run})  # refused, or a join that can do nothing to the run
    other.ask("reset", {"clean": True})
    other.close()
    assert owner.ask("hello")["t"] == "reply"
    assert [p.pid for p in netspecd.run_processes(run)] == [pid]
    owner.close()


def test_a_plain_command_started_at_run_may_be_entered_at_run_twice(netspecd, key):
    run = session_run_id("run-twice")
    client = Client(netspecd.port, key)
    assert refused(_setup(client, run, [{"name": "late", "argv": ["true"], "start": "run"}])) is None
    for step, phase in enumerate(["launch", "run", "run", "collect"]):
        _enter(client, phase, step, ["late"])
        deadline = time.monotonic() + HANG_S
        while not any(e.get("t") == "ack" and e.get("step") == step for e in client.events):
            _read_event(client, deadline)  # raises Dropped if the session died
        wait_for(lambda: not netspecd.run_processes(run), timeout=HANG_S, what="the command to end")
    # The session lives on: a daemon that started the command twice loses it as the second
    # one's exit is handled, milliseconds after it ends. Watched for a window well past that.
    window = time.monotonic() + 1.5
    while time.monotonic() < window:
        assert client.ask("hello")["t"] == "reply"
        time.sleep(0.1)
    client.close()


def _read_event(client: Client, deadline: float) -> None:
    try:
        client.events.append(client.frame(deadline))
    except Hang:
        pytest.fail("no ack within the deadline")


def test_a_tree_with_the_daemon_as_its_own_child_leaves_the_daemon_idle(netspecd, key):
    client = Client(netspecd.port, key)
    _setup(client, session_run_id("own-child"))
    itself = {"host": "h2", "address": ["127.0.0.1", netspecd.port], "hosts": ["h2"]}
    client.ask("tree", {"children": [itself]})
    client.ask("enter", {"phase": "run", "step": 1, "deadline_s": 3, "published": {},
                         "hosts": {"h": 0, "h2": 0}, "lists": [[]]})
    before, started = netspecd.cpu_s(), time.monotonic()
    time.sleep(1.0)  # the window measured, not a wait: a loop burns CPU in it, an idle daemon none
    share = (netspecd.cpu_s() - before) / (time.monotonic() - started)
    client.close()
    assert share < SPIN_SHARE


def test_a_component_named_like_the_daemon_is_refused(netspecd, key):
    client = Client(netspecd.port, key)
    answer = _setup(client, session_run_id("named-netspecd"), [{"name": "netspecd", "argv": ["true"]}])
    client.close()
    assert refused(answer) is not None
