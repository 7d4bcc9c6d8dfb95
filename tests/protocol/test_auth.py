import asyncio
import os
import stat
import threading

import msgpack
import pytest
from netspec.protocol.auth import (
    _mac,
    _seals,
    client_handshake,
    load_or_create_key,
    new_run_key,
    read_run_key,
    server_handshake,
    take_run_key,
)
from netspec.protocol.channel import Channel
from netspec.protocol.errors import AuthError, ConfigError, ProtocolError
from netspec.protocol.messages import PROTOCOL_VERSION
from netspec.protocol.wire import encode


async def _pair() -> tuple[Channel, Channel]:
    a, b = __import__("socket").socketpair()
    return await Channel.over(a, "server-side"), await Channel.over(b, "client-side")


async def _handshake(server_key: bytes, client_key: bytes):
    server, client = await _pair()
    results = await asyncio.gather(server_handshake(server, server_key),
                                   client_handshake(client, client_key), return_exceptions=True)
    await server.close()
    await client.close()
    return results


def test_the_same_key_on_both_sides_authenticates():
    key = os.urandom(32)
    assert asyncio.run(_handshake(key, key)) == [None, None]


def test_a_wrong_key_is_refused_on_both_sides():
    server, client = asyncio.run(_handshake(os.urandom(32), os.urandom(32)))
    assert isinstance(server, AuthError)
    assert isinstance(client, AuthError)
    assert "refused our key" in str(client)


def test_the_key_file_is_created_once_with_mode_0600(tmp_path):
    path = tmp_path / "sub" / "key"
    key = load_or_create_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(key) == 32
    assert load_or_create_key(path) == key


def test_a_key_file_readable_by_others_is_refused(tmp_path):
    path = tmp_path / "key"
    load_or_create_key(path)
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_or_create_key(path)


def test_after_the_handshake_only_frames_sealed_for_this_connection_are_taken():
    async def scenario():
        server, client = await _pair()
        key = os.urandom(32)
        await asyncio.gather(server_handshake(server, key), client_handshake(client, key))
        client.send({"t": "hello", "id": 1})
        assert await server.recv() == {"t": "hello", "id": 1}
        server.send({"t": "reply", "id": 1})
        assert await client.recv() == {"t": "reply", "id": 1}
        # Someone on the path writes a well-formed but unsealed frame into the stream.
        client.transport.write(encode({"t": "reset", "id": 2, "clean": True}))
        with pytest.raises(ProtocolError, match="MAC check"):
            await server.recv()
        await server.close()
        await client.close()
    asyncio.run(scenario())


async def _peer_of(channel_side: str):
    """A channel of the side under test and, for the other end, raw asyncio streams."""
    a, b = __import__("socket").socketpair()
    channel = await Channel.over(a, channel_side)
    reader, writer = await asyncio.open_connection(sock=b)
    return channel, reader, writer


async def _read_frame(reader: asyncio.StreamReader) -> dict:
    length = int.from_bytes(await reader.readexactly(4), "big")
    return msgpack.unpackb(await reader.readexactly(length))


def test_a_frame_written_unsealed_behind_a_genuine_auth_is_refused_by_the_daemon_side():
    async def scenario():
        key = os.urandom(32)
        server, reader, writer = await _peer_of("server-side")
        handshake = asyncio.create_task(server_handshake(server, key))
        challenge = await _read_frame(reader)
        nonce_c = os.urandom(32)
        auth = {"t": "auth", "nonce": nonce_c, "mac": _mac(key, b"client", challenge["nonce"], nonce_c)}
        # One segment: the genuine auth, then a command no one sealed.
        writer.write(encode(auth) + encode({"t": "setup", "id": 1, "run": "r", "components": []}))
        await handshake
        with pytest.raises(ProtocolError, match="MAC check"):
            await asyncio.wait_for(server.recv(), 10)
        writer.close()
        await server.close()
    asyncio.run(scenario())


@pytest.mark.parametrize("behind", ["unsealed", "sealed"])
def test_a_frame_behind_the_welcome_in_one_segment_is_taken_only_sealed_by_the_client(behind):
    async def scenario():
        key = os.urandom(32)
        client, reader, writer = await _peer_of("client-side")
        nonce_s = os.urandom(32)
        writer.write(encode({"t": "challenge", "nonce": nonce_s, "proto": PROTOCOL_VERSION}))
        handshake = asyncio.create_task(client_handshake(client, key))
        auth = await _read_frame(reader)
        welcome = encode({"t": "welcome", "mac": _mac(key, b"server", auth["nonce"], nonce_s)})
        _, to_controller = _seals(key, auth["nonce"], nonce_s)
        event = {"t": "exit", "component": "c", "returncode": 0}
        writer.write(welcome + encode(event, to_controller if behind == "sealed" else None))
        await handshake
        if behind == "sealed":
            assert await asyncio.wait_for(client.recv(), 10) == event
        else:
            with pytest.raises(ProtocolError, match="MAC check"):
                await asyncio.wait_for(client.recv(), 10)
        writer.close()
        await client.close()
    asyncio.run(scenario())


def test_hosts_reached_at_once_on_first_use_all_take_one_whole_key(tmp_path):
    # `up` prepares its hosts in threads, each loading the controller's key; on first use one
    # makes it while the others read it.
    for trial in range(50):
        path = tmp_path / f"home{trial}" / "key"
        start = threading.Barrier(8)
        keys, errors = [], []

        def take(path=path, start=start, keys=keys, errors=errors):
            start.wait(timeout=10)
            try:
                keys.append(load_or_create_key(path))
            except ConfigError as exc:
                errors.append(exc)
        threads = [threading.Thread(target=take) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert errors == [] and len(keys) == 8 and len(set(keys)) == 1, (trial, errors)
        assert [p.name for p in path.parent.iterdir()] == ["key"]  # nothing left aside


def test_a_run_key_is_fresh_and_its_file_is_gone_once_read_whether_taken_or_refused(tmp_path):
    assert new_run_key() != new_run_key() and len(new_run_key()) == 32
    key, path = new_run_key(), tmp_path / "run.key"
    path.write_text(key.hex() + "\n")
    path.chmod(0o600)
    assert take_run_key(path) == key and not path.exists()
    path.write_text("ab" * 8 + "\n")
    path.chmod(0o644)  # readable by others: refused, and not left for them
    with pytest.raises(ConfigError, match="chmod 600"):
        take_run_key(path)
    assert not path.exists()
    with pytest.raises(ConfigError, match="no key file for the run"):
        take_run_key(path)


def test_a_run_key_on_a_stream_is_its_first_line_and_what_follows_is_left_unread():
    key = new_run_key()
    r, w = os.pipe()
    os.write(w, (key.hex() + "\n").encode() + b"lifeline")
    os.close(w)
    assert read_run_key(r) == key
    assert os.read(r, 100) == b"lifeline"
    os.close(r)
    for said, text in (("ended before", b"abcd"), ("not hex", b"zz\n"), ("shorter than 16", b"abcd\n")):
        r, w = os.pipe()
        os.write(w, text)
        os.close(w)
        with pytest.raises(ConfigError, match=said):
            read_run_key(r)
        os.close(r)
