"""netspecd as a real process: authentication, framing limits, error replies."""

import asyncio
import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest
from daemonview import Session
from netspec.controller.hosts.fleet import DaemonClient, Lost
from netspec.daemon.server import HANDSHAKE_TIMEOUT_S, MAX_CONNECTIONS, MAX_HANDSHAKES, MAX_IN_FLIGHT
from netspec.protocol import messages as m
from netspec.protocol.auth import _mac
from netspec.protocol.errors import AuthError, RemoteError
from netspec.protocol.exits import run_processes
from netspec.protocol.wire import encode
from support import PROGRAMS, on_the_wire, session_run_id, wait_for


async def _client(port: int, key: bytes, events=None) -> tuple[DaemonClient, asyncio.Task]:
    def on_event(host: str, event) -> None:
        if events is not None:  # each as the map it was on the wire
            events.append((host, {"t": "lost"} if isinstance(event, Lost) else on_the_wire(event)))
    client = await DaemonClient.connect("t", ("127.0.0.1", port), key, on_event)
    return client, asyncio.create_task(client.serve())


async def _hello(port: int, key: bytes) -> dict:
    client, serving = await _client(port, key)
    try:
        return await client.request("hello", asyncio.get_running_loop().time() + 10)
    finally:
        await client.close()
        await serving


def _raw(port: int, payload: bytes) -> bytes:
    """Send raw bytes after reading the challenge; return all the daemon sends back."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.recv(4096)
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
        return received


def test_hello_reports_host_facts(daemon, key):
    reply = asyncio.run(_hello(daemon.port, key))
    assert reply.protocol == m.PROTOCOL_VERSION
    assert reply.facts.kernel == os.uname().release
    assert reply.facts.cpu_count == os.cpu_count()


def test_a_client_with_the_wrong_key_is_refused_and_the_daemon_stays_up(daemon, key):
    with pytest.raises(AuthError):
        asyncio.run(_hello(daemon.port, os.urandom(32)))
    assert daemon.alive
    assert asyncio.run(_hello(daemon.port, key)).protocol == m.PROTOCOL_VERSION


def test_a_command_without_authentication_is_refused(daemon, key):
    answer = _raw(daemon.port, encode({"t": "hello", "id": 1}))
    assert b"authentication failed" in answer
    assert b"facts" not in answer
    assert daemon.alive
    assert asyncio.run(_hello(daemon.port, key)).protocol == m.PROTOCOL_VERSION


@pytest.mark.parametrize("payload", [
    struct.pack(">I", 1 << 30),                      # oversized before authentication
    struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1",  # not msgpack
    struct.pack(">I", 3) + msgpack.packb([1, 2]),    # msgpack, but not a message map
    b"\x00\x00",                                     # a frame cut short
])
def test_malformed_and_oversized_frames_drop_the_connection_not_the_daemon(daemon, key, payload):
    answer = _raw(daemon.port, payload)
    assert b"facts" not in answer
    assert daemon.alive
    assert asyncio.run(_hello(daemon.port, key)).protocol == m.PROTOCOL_VERSION


def test_an_oversized_frame_after_authentication_drops_only_that_connection(daemon, key):
    async def scenario():
        client, serving = await _client(daemon.port, key)
        client.channel.transport.write(struct.pack(">I", 64 * 1024 * 1024) + b"x" * 1024)
        await serving  # the daemon hangs up
        return await _hello(daemon.port, key)
    assert asyncio.run(scenario()).protocol == m.PROTOCOL_VERSION
    assert daemon.alive


def test_an_unknown_request_gets_an_error_reply_and_the_connection_lives_on(daemon, key):
    async def scenario():
        client, serving = await _client(daemon.port, key)
        deadline = asyncio.get_running_loop().time() + 10
        with pytest.raises(RemoteError, match="unknown request type 'frobnicate'"):
            await client.request("frobnicate", deadline)
        with pytest.raises(RemoteError, match="no run is set up"):
            await client.request("files", deadline)
        reply = await client.request("hello", deadline)
        await client.close()
        await serving
        return reply
    assert asyncio.run(scenario()).pid > 0


@pytest.mark.parametrize(("setup", "message"), [
    ({"run": "../escape", "components": []}, "run id '../escape' is not a name"),
    ({"run": "", "components": []}, "run id '' is not a name"),
    ({"run": "/abs", "components": []}, "run id '/abs' is not a name"),
    ({"run": "r1", "components": [{"name": "../c", "argv": ["true"]}]}, "component '../c' is not a name"),
    ({"run": "r1", "components": [], "streams": {"../s": {"enable": ["A"]}}}, "stream '../s' is not a name"),
    ({"run": "r1", "host": "a/b", "components": []}, "host 'a/b' is not a name"),
])
def test_names_that_would_become_paths_outside_the_daemons_root_are_refused(daemon, key, tmp_path,
                                                                            setup, message):
    async def scenario():
        client, serving = await _client(daemon.port, key)
        deadline = asyncio.get_running_loop().time() + 10
        try:
            with pytest.raises(RemoteError, match=message.replace("(", r"\(")):
                await client.request("setup", deadline, **setup)
            with pytest.raises(RemoteError, match="no run is set up"):
                await client.request("files", deadline)
        finally:
            await client.close()
            await serving
    asyncio.run(scenario())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["droot", "home"]  # nothing outside the root
    assert not any((tmp_path / "droot").rglob("*escape*"))


def test_a_fifo_among_a_runs_files_is_listed_missing_and_never_opened(daemon, key, tmp_path):
    async def scenario():
        client, serving = await _client(daemon.port, key)
        deadline = asyncio.get_running_loop().time() + 10
        try:
            reply = await client.request("setup", deadline, run="r1", host="h", components=[])
            streams = tmp_path / "droot" / "r1" / "streams"
            streams.mkdir(parents=True, exist_ok=True)
            os.mkfifo(streams / "trap.ds")
            (streams / "fine.ds").write_bytes(b"x" * 10)
            listed = {f.name: f for f in (await client.request("files", deadline)).files}
            assert listed["streams/trap.ds"].missing and not listed["streams/fine.ds"].missing
            with pytest.raises(RemoteError, match="is not a file of this run"):
                await client.request("read", deadline, path=listed["streams/trap.ds"].path, offset=0)
            data = await client.request("read", deadline, path=listed["streams/fine.ds"].path, offset=0)
            assert data.data == b"x" * 10 and data.eof
            assert (await client.request("hello", deadline)).pid > 0  # still answering
            return reply
        finally:
            await client.close()
            await serving
    asyncio.run(scenario())


def test_a_malformed_enter_is_an_error_event_and_a_hang_up_still_ends_the_run(daemon, key):
    run_id = session_run_id("r-malformed")

    async def scenario():
        events = []
        client, serving = await _client(daemon.port, key, events)
        deadline = asyncio.get_running_loop().time() + 10
        await client.request("setup", deadline, run=run_id, host="h",
                             components=[{"name": "sleeper", "argv": ["sleep", "300"],
                                          "stop": "collect"}])
        client.notify("enter", phase="launch", step=0, components=[{"name": "sleeper"}], published={})
        async with asyncio.timeout_at(deadline):
            while not any(e.get("t") == "ack" for _, e in events):
                await asyncio.sleep(0.01)
        assert run_processes(run_id)
        for bad in ({"components": [{"name": "sleeper"}]}, {"phase": "x", "step": "1", "components": []},
                    {"phase": "x", "step": 1, "components": [7]}):
            client.notify("enter", **bad)
        assert (await client.request("hello", deadline)).pid > 0  # the session lives on
        # Each refused where it was read, naming the field; the session reads on.
        errors = [e["error"]["message"] for _, e in events if e.get("t") == "error"]
        assert errors == ["request 'enter' does not fit: Object missing required field `phase`",
                          "request 'enter' does not fit: Expected `int`, got `str` - at `$.step`",
                          "request 'enter' does not fit: Expected `object`, got `int` - at `$.components[0]`"]
        await client.close()
        await serving
    asyncio.run(scenario())
    wait_for(lambda: not run_processes(run_id), what="the hung-up session's run to end")


def test_sessions_past_the_cap_are_told_so_and_the_daemon_serves_on(daemon, key):
    async def scenario():
        held = [await _client(daemon.port, key) for _ in range(MAX_CONNECTIONS)]
        with pytest.raises(AuthError, match=f"refused the connection: netspecd has {MAX_CONNECTIONS} "):
            await _hello(daemon.port, key)
        for client, serving in held:
            await client.close()
            await serving
        return await wait_for_async(lambda: _hello(daemon.port, key))
    assert asyncio.run(scenario()).protocol == m.PROTOCOL_VERSION
    assert daemon.alive


def test_a_controller_gets_in_past_hundreds_of_idle_and_half_open_connections(daemon, key):
    async def scenario():
        # No handshake's deadline can pass before its timeout from here.
        opened = asyncio.get_running_loop().time()
        idle = [await asyncio.open_connection("127.0.0.1", daemon.port) for _ in range(300)]
        half_open = []
        for _ in range(MAX_CONNECTIONS + MAX_HANDSHAKES):
            reader, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
            await reader.read(4096)  # the challenge
            writer.write(struct.pack(">I", 100) + b"\x83")  # an auth begun, never finished
            half_open.append((reader, writer))
        reply = await _hello(daemon.port, key)
        answered = asyncio.get_running_loop().time()
        for _, writer in idle + half_open:
            writer.close()
        return reply, answered - opened
    reply, took = asyncio.run(scenario())
    assert reply.protocol == m.PROTOCOL_VERSION
    # Not by waiting out the others' handshake deadline: answered before the first of them
    # could have passed, however long the machine took to open them.
    assert took < HANDSHAKE_TIMEOUT_S
    assert daemon.alive


async def wait_for_async(attempt, timeout=10.0):
    """`attempt()`, tried again while it is refused (AuthError) until `timeout` s have passed;
    the last refusal raised."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            return await attempt()
        except AuthError:
            if asyncio.get_running_loop().time() > deadline:
                raise
        await asyncio.sleep(0.05)


def _auth_frame(sock: socket.socket, key: bytes) -> bytes:
    """Read the daemon's challenge from `sock` and return a genuine auth frame for it."""
    length = struct.unpack(">I", _exactly(sock, 4))[0]
    challenge = msgpack.unpackb(_exactly(sock, length))
    nonce_c = os.urandom(32)
    return encode({"t": "auth", "nonce": nonce_c, "mac": _mac(key, b"client", challenge["nonce"], nonce_c)})


def _exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "the daemon hung up"
        data += chunk
    return data


def _until_hang_up(sock: socket.socket) -> tuple[bytes, bool]:
    """All the daemon sends until it hangs up (True) or is silent for 10 s (False)."""
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        return received, False
    return received, True


def test_commands_written_unsealed_behind_a_genuine_auth_are_never_run(daemon, key, tmp_path):
    run_id = session_run_id("r-unsealed")
    setup = {"t": "setup", "id": 1, "run": run_id, "host": "h",
             "components": [{"name": "sleeper", "argv": ["sleep", "300"], "stop": "collect"}]}
    enter = {"t": "enter", "phase": "launch", "step": 0, "components": [{"name": "sleeper"}],
             "published": {}}
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=10) as sock:
        # One segment: the genuine auth, then a setup and a launch that no one sealed.
        sock.sendall(_auth_frame(sock, key) + encode(setup) + encode(enter) + encode({"t": "hello", "id": 2}))
        received, hung_up = _until_hang_up(sock)
    welcome = encode({"t": "welcome", "mac": b"\0" * 32})
    assert hung_up and len(received) == len(welcome), received  # the welcome, then nothing
    assert not (tmp_path / "droot" / run_id).exists()
    assert not run_processes(run_id)
    assert asyncio.run(_hello(daemon.port, key)).protocol == m.PROTOCOL_VERSION


def _peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


def test_a_sealed_frame_of_millions_of_empty_arrays_is_refused_without_growing_the_daemon(daemon, key):
    async def scenario():
        client, serving = await _client(daemon.port, key)
        await client.request("hello", asyncio.get_running_loop().time() + 10)
        before = _peak_rss_mib(daemon.proc.pid)
        # Issue 38's frame: 3.8 MiB of empty arrays (one byte each, 64 once built).
        client.channel.send({"t": "hello", "id": 99, "pad": [[]] * (38 * 1024 * 1024 // 10)})
        await asyncio.wait_for(serving, 10)  # the daemon hangs up
        return before
    before = asyncio.run(scenario())
    # Its peak, not what is left: once built, the arrays are let go (284 MiB more at the peak
    # before they were bounded; 11 MiB now, the frame's own bytes).
    assert _peak_rss_mib(daemon.proc.pid) - before < 32
    assert asyncio.run(_hello(daemon.port, key)).protocol == m.PROTOCOL_VERSION


def test_a_flood_of_pipelined_requests_is_answered_whole_past_the_in_flight_limit(daemon, key):
    async def scenario():
        client, serving = await _client(daemon.port, key)
        deadline = asyncio.get_running_loop().time() + 30
        replies = await asyncio.gather(*(client.request("hello", deadline) for _ in range(3 * MAX_IN_FLIGHT)))
        await client.close()
        await serving
        return replies
    replies = asyncio.run(scenario())  # each request returns once its own id is answered
    assert len(replies) == 3 * MAX_IN_FLIGHT and all(r.pid > 0 for r in replies)


def test_a_daemon_stopped_mid_step_ends_its_session_and_the_runs_processes_and_exits(key, tmp_path):
    run = session_run_id("run-stopped")
    proc = subprocess.Popen([sys.executable, "-m", "netspec.daemon.main", "--listen", "127.0.0.1:0",
                             "--announce", "--root", str(tmp_path / "droot")],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = json.loads(proc.stdout.readline())["port"]

        async def scenario():
            async with Session(port, key) as s:
                await s.request("setup", run=run, components=[
                    {"name": "actor", "program": str(PROGRAMS / "actor.py"), "args": ["launch,work"]}])
                s.client.notify("enter", phase="launch", step=0, published={}, components=[{"name": "actor"}])
                assert (await s.event("ack", "actor"))["status"] == "ok"
                s.client.notify("enter", phase="work", step=1, published={},
                                components=[{"name": "actor", "params": {"hang_in": "work"}}])
                proc.terminate()
                async with asyncio.timeout(20):  # its hang-up, once the run is reset
                    await asyncio.shield(s.serving)
        asyncio.run(scenario())
        assert proc.wait(timeout=20) == 0
        assert run_processes(run) == []
    finally:
        proc.kill()
        proc.wait()
