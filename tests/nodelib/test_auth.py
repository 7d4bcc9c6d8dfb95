import asyncio
import os
import stat

import pytest
from netspec.protocol.auth import client_handshake, load_or_create_key, server_handshake
from netspec.protocol.channel import Channel
from netspec.protocol.errors import AuthError, ConfigError, ProtocolError
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
