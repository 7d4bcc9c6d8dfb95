"""One transport suite, run over a socketpair and over loopback TCP (trio's
check_two_way_stream; dask runs the same checks over each comm)."""

import asyncio
import socket
import struct

import pytest
from netspec.protocol.blockingchannel import BlockingChannel
from netspec.protocol.channel import READY_LIMIT, Channel
from netspec.protocol.errors import ProtocolError
from netspec.protocol.wire import encode


async def socketpair_channels():
    a, b = socket.socketpair()
    return [await Channel.over(s, peer=n) for s, n in ((a, "a"), (b, "b"))]


async def tcp_channels():
    accepted = asyncio.get_running_loop().create_future()

    async def on_channel(channel: Channel) -> None:
        accepted.set_result(channel)
    async with asyncio.TaskGroup() as tg:
        server = await Channel.serve(on_channel, "127.0.0.1", 0, tg)
        port = server.sockets[0].getsockname()[1]
        a = await Channel.connect("127.0.0.1", port, peer="a")
        b = await accepted
        server.close()
    return [a, b]


TRANSPORTS = {"socketpair": socketpair_channels, "tcp": tcp_channels}


@pytest.fixture(params=sorted(TRANSPORTS))
def transport(request):
    return TRANSPORTS[request.param]


def test_messages_arrive_in_order_both_ways(transport):
    async def scenario():
        a, b = await transport()
        for i in range(500):
            a.send({"t": "n", "i": i, "pad": b"x" * (i * 37 % 5000)})
            b.send({"t": "m", "i": -i})
        got_b = [(await b.recv())["i"] for _ in range(500)]
        got_a = [(await a.recv())["i"] for _ in range(500)]
        await a.close()
        assert await b.recv() is None
        await b.close()
        return got_a, got_b
    got_a, got_b = asyncio.run(scenario())
    assert got_b == list(range(500)) and got_a == [-i for i in range(500)]


def test_what_a_take_handles_skips_recv_and_the_rest_keeps_its_order(transport):
    async def scenario():
        a, b = await transport()
        taken = []

        def take(message):
            if message["t"] == "fast":
                taken.append(message["i"])
                return True
            return False
        b.take(take)
        for i in range(200):
            a.send({"t": "slow" if i % 3 == 2 else "fast", "i": i})
        await a.close()
        received = []
        while (message := await b.recv()) is not None:
            received.append(message["i"])
        await b.close()
        return taken, received
    taken, received = asyncio.run(scenario())
    # A fast one is taken only while no slow one waits ahead of it: every slow one, and
    # the fast ones that came behind it, reach recv in order.
    assert sorted(taken + received) == list(range(200)) and received == sorted(received)
    assert set(range(2, 200, 3)) <= set(received) and all(i % 3 != 2 for i in taken) and taken


def test_take_each_hands_on_what_came_before_it_then_the_rest_in_order_until_the_end(transport):
    async def scenario():
        a, b = await transport()
        for i in range(50):
            a.send({"t": "n", "i": i})
        await wait_until(lambda: len(b._ready) == 50)  # decoded and queued before any taker
        handled = []
        each = asyncio.create_task(b.take_each(lambda message: handled.append(message["i"])))
        await wait_until(lambda: len(handled) == 50)  # those handed on before any other came
        for i in range(50, 100):
            a.send({"t": "n", "i": i})
        await a.close()
        await asyncio.wait_for(each, 5)  # a clean end returns
        await b.close()
        return handled
    assert asyncio.run(scenario()) == list(range(100))


def test_a_take_that_refuses_a_message_ends_the_channel_and_recv_says_why(transport):
    async def scenario():
        a, b = await transport()

        def take(message):
            raise ProtocolError(f"refused {message['i']}")
        b.take(take)
        a.send({"t": "x", "i": 7})
        with pytest.raises(ProtocolError, match="refused 7"):
            await asyncio.wait_for(b.recv(), 5)
        assert b.closing
        assert await asyncio.wait_for(a.recv(), 5) is None  # the peer saw the hang-up
        await a.close()
        await b.close()
    asyncio.run(scenario())


def test_a_peer_that_floods_an_idle_reader_is_held_back_by_the_socket(transport):
    async def scenario():
        a, b = await transport()
        sent = 0
        while b.transport.is_reading() and sent < 100 * READY_LIMIT:
            a.send({"t": "n", "i": sent})
            sent += 1
            await asyncio.sleep(0)  # let b read what came
        held = len(b._ready)
        got = [(await b.recv())["i"] for _ in range(sent)]
        resumed = b.transport.is_reading()
        await a.close()
        await b.close()
        return held, got, sent, resumed
    held, got, sent, resumed = asyncio.run(scenario())
    assert held >= READY_LIMIT and sent < 100 * READY_LIMIT
    assert got == list(range(sent)) and resumed


def test_a_reset_connection_is_an_error_after_what_came_before_it():
    async def scenario():
        a, b = await tcp_channels()
        a.send({"t": "last", "i": 1})
        await a.drain()
        got = await asyncio.wait_for(b.recv(), 5)
        a.send({"t": "after", "i": 2})
        await a.drain()
        sock = a.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
        a.transport.abort()
        after = await asyncio.wait_for(b.recv(), 5)
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(b.recv(), 5)
        await b.close()
        return got, after
    assert asyncio.run(scenario()) == ({"t": "last", "i": 1}, {"t": "after", "i": 2})


def test_a_large_message_crosses_whole(transport):
    async def scenario():
        a, b = await transport()
        blob = bytes(range(256)) * 40000  # 10 MB
        a.send({"t": "blob", "data": blob})
        drained = asyncio.create_task(a.drain())
        message = await b.recv()
        await drained
        await a.close()
        await b.close()
        return message["data"] == blob
    assert asyncio.run(scenario())


def test_a_connection_closed_inside_a_frame_is_a_protocol_error(transport):
    async def scenario():
        a, b = await transport()
        a.transport.write(struct.pack(">I", 100) + b"short")
        await a.close()
        with pytest.raises(ProtocolError, match="closed inside a frame"):
            await b.recv()
        await b.close()
    asyncio.run(scenario())


def test_the_blocking_channel_speaks_the_same_frames():
    async def scenario():
        ours, theirs = socket.socketpair()
        channel = await Channel.over(ours, peer="daemon")
        component = BlockingChannel(theirs.detach())
        channel.send({"t": "enter", "id": 1})
        await channel.drain()
        assert await asyncio.to_thread(component.recv) == {"t": "enter", "id": 1}
        component.send({"t": "ack", "id": 1})
        assert await channel.recv() == {"t": "ack", "id": 1}
        component.close()
        assert await channel.recv() is None
        await channel.close()
    asyncio.run(scenario())


def test_a_held_channel_is_answered_once_a_whole_frame_is_in_not_a_part_of_one():
    async def scenario():
        a, b = await socketpair_channels()
        a.hold()
        frame = encode({"t": "auth", "nonce": b"n" * 32})
        b.transport.write(frame[:5])
        await wait_until(lambda: a.decoder.pending == 5)
        assert not a.answered
        b.transport.write(frame[5:])
        await wait_until(lambda: a.answered)
        assert await a.recv() == {"t": "auth", "nonce": b"n" * 32}
        assert not a.answered
        await a.close()
        await b.close()
    asyncio.run(scenario())


async def wait_until(condition, timeout=10.0):
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.001)
