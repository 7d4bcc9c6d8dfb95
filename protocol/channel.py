"""Message channels over sockets for daemon and controller, in asyncio (a component's is
blockingchannel.py's, which loads neither asyncio nor msgspec).

It uses the pure FrameDecoder of wire.py; after a ProtocolError the connection is dropped.
An asyncio channel given `kinds` (a reading.Reader) hands on typed messages from its seal on:
each frame is decoded into its Struct there, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import socket
import sys
import termios
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec

from .errors import ConnectionLost, ProtocolError
from .reading import Reader
from .wire import MAX_FRAME, FrameDecoder, Seal, encode

# Messages decoded but not yet taken by `recv` past which the socket is not read until they
# are: a peer that floods is held back by TCP, not queued in memory.
READY_LIMIT = 256

Take = Callable[[Any], bool]


class Channel(asyncio.Protocol):
    """An asyncio message channel: `recv` returns None at a clean end of stream.

    It is the connection's protocol itself, not a stream reader's consumer: a frame is
    decoded as its bytes arrive, and a consumer that `take`s messages handles them there
    and then, without a task woken per message (a node step's enter, a step's acks).

    Lifecycle: made by `connect`, `over` or `serve`; `close` (or leaving its `async with`)
    ends it and may be called twice.
    """

    def __init__(self, peer: str = "", max_frame: int = MAX_FRAME,
                 on_open: Callable[[Channel], None] | None = None, kinds: Reader | None = None):
        self.peer, self._on_open, self.kinds = peer, on_open, kinds
        self.decoder = FrameDecoder(max_frame)
        self.transport: asyncio.Transport | None = None
        self._ready: deque[Any] = deque()
        self._seal: Seal | None = None
        self._held = False  # in a handshake: a frame is decoded only when `recv` asks for it
        self._take: Take | None = None
        self._eof = False
        self._error: BaseException | None = None
        self._reader: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None
        self._lost = asyncio.get_running_loop().create_future()

    @classmethod
    async def connect(cls, host: str, port: int, peer: str = "", kinds: Reader | None = None) -> Channel:
        _, channel = await asyncio.get_running_loop().create_connection(lambda: cls(peer, kinds=kinds),
                                                                        host, port)
        return channel

    @classmethod
    async def over(cls, sock: socket.socket, peer: str = "") -> Channel:
        """A channel over a socket already connected (a socketpair's end)."""
        _, channel = await asyncio.get_running_loop().create_connection(lambda: cls(peer), sock=sock)
        return channel

    @classmethod
    async def serve(cls, on_channel: Callable[[Channel], Coroutine[Any, Any, None]], host: str,
                    port: int, tg: asyncio.TaskGroup) -> asyncio.Server:
        """Listen; each connection's channel is served by `on_channel` in a task of `tg`,
        which the caller owns: close the server before `tg` ends, and `tg` waits for every
        connection's task. A connection that comes as `tg` is shutting down is hung up."""
        def opened(channel: Channel) -> None:
            try:
                tg.create_task(on_channel(channel))
            except RuntimeError:  # its owner is ending: nobody would serve it
                channel.hang_up()
        return await asyncio.get_running_loop().create_server(lambda: cls(on_open=opened), host, port)

    async def __aenter__(self) -> Channel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def hold(self) -> None:
        """Decode no frame until `recv` asks for one, and then that one alone, until `seal`:
        what a handshake's peer writes after its last handshake frame (in the same segment
        or not) waits undecoded for the seal, which it must then carry (auth.py)."""
        self._held = True

    def seal(self, outgoing: Seal, incoming: Seal) -> None:
        """From now on every frame is tagged and every frame received must carry its tag,
        the bytes held since the handshake's last frame too (`hold`). A message decoded
        before the seal and never read ends the channel: it came unsealed after the
        handshake's own. From here on a channel with `kinds` hands on typed messages."""
        self._seal, self.decoder.seal, self._held = outgoing, incoming, False
        if self.kinds is not None:
            self.decoder.read = self.kinds
        if self._ready:
            self._fail(ProtocolError(f"{len(self._ready)} frame(s) came unsealed after the handshake",
                                     self.peer))
            return
        if self.transport is not None:
            self.transport.resume_reading()
        self.data_received(b"")

    def take(self, handler: Take | None) -> None:
        """Hand each message, as it is decoded, to `handler` first: what it returns True for
        is handled, the rest wait for `recv` in order. An exception it raises ends the
        channel and is raised by `recv`. Only while no message waits, so that order holds."""
        self._take = handler

    async def take_each(self, handler: Callable[[Any], None]) -> None:
        """Hand every message to `handler` as it is decoded (`take`), those decoded before in
        order first, until a clean end of the stream; anything else is raised as by `recv`."""
        def take(message: Any) -> bool:
            handler(message)
            return True
        self.take(take)
        while (message := await self.recv()) is not None:
            handler(message)

    async def recv(self) -> Any:
        """The next message (a map, or with `kinds` a typed one once sealed), None at a
        clean end of the stream."""
        while not self._ready:
            if self._held and self._error is None:
                self._decode(b"", most=1)  # one held back: the handshake asks for it now
                if self._ready:
                    break
                if self.transport is not None:
                    self.transport.resume_reading()
            if self._error is not None:
                raise self._error
            if self._eof:
                if self.decoder.pending:
                    raise ProtocolError("connection closed inside a frame", self.peer)
                return None
            self._reader = asyncio.get_running_loop().create_future()
            try:
                await self._reader
            finally:
                self._reader = None
        message = self._ready.popleft()
        if len(self._ready) < READY_LIMIT // 2 and self.transport is not None:
            self.transport.resume_reading()  # a no-op unless paused below
        return message

    def send(self, message: dict[str, Any] | msgspec.Struct) -> None:
        """Queue one message; call `drain` where back-pressure matters."""
        if self.closing:
            raise ConnectionLost(self.peer, detail="connection is closed")
        assert self.transport is not None
        self.transport.write(encode(message, self._seal))

    async def drain(self) -> None:
        if self._writable is not None and not self._lost.done():
            await asyncio.shield(self._writable)
        if self._lost.done():
            raise ConnectionLost(self.peer, detail=str(self._lost.result() or "connection is closed"))

    @property
    def answered(self) -> bool:
        """Whether the peer has sent what was not handled yet: a whole frame (decoded or
        not), or bytes the socket holds unread. A handshake whose answer is in is not the
        one to drop for a newcomer (daemon/server.py)."""
        if self._ready or self.decoder.whole:
            return True
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None or sock.fileno() < 0:
            return False
        try:
            unread = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
        except OSError:  # closed under us: nothing will be read from it
            return False
        return int.from_bytes(unread, sys.byteorder) > 0

    @property
    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def hang_up(self) -> None:
        """Close without waiting: what was written still goes first, then the peer sees the
        end of the stream."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    async def close(self) -> None:
        self.hang_up()
        if self.transport is not None:
            with contextlib.suppress(ConnectionError, OSError):
                await asyncio.shield(self._lost)

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if not self.peer:
            peername = transport.get_extra_info("peername")
            self.peer = "{}:{}".format(*peername[:2]) if isinstance(peername, tuple) else "peer"
        if self._on_open is not None:
            self._on_open(self)

    def data_received(self, data: bytes) -> None:
        if self._error is None:
            if self._held:
                self._hold_back(data)
                return
            self._decode(data)
            if self._ready:  # what a `take` handled wakes nobody
                self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        if exc is not None and self._error is None:
            self._error = exc  # a reset, not a clean end: recv says so, after what came before it
        if not self._lost.done():
            self._lost.set_result(exc)
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._wake()

    def pause_writing(self) -> None:
        self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    def _hold_back(self, data: bytes) -> None:
        """In a handshake: decode one frame if `recv` waits for one, keep the rest undecoded,
        and read no more while a frame or more is held (a peer cannot fill memory)."""
        asked = self._reader is not None and not self._reader.done() and not self._ready
        self._decode(data, most=1 if asked else 0)
        if self._ready:
            self._wake()
        if (self._ready or not asked) and self.decoder.pending and self.transport is not None:
            self.transport.pause_reading()

    def _decode(self, data: bytes, most: int | None = None) -> None:
        try:
            messages = self.decoder.feed(data, most)
        except ProtocolError as exc:
            self._fail(ProtocolError(str(exc), self.peer))
            return
        for message in messages:
            if self._take is not None and not self._ready:
                try:
                    if self._take(message):
                        continue
                except Exception as exc:  # the consumer's refusal: raised by its recv
                    self._fail(exc)
                    return
            self._ready.append(message)
        if len(self._ready) >= READY_LIMIT and self.transport is not None:
            self.transport.pause_reading()  # a no-op if paused already

    def _fail(self, exc: BaseException) -> None:
        self._error = exc
        self.hang_up()
        self._wake()

    def _wake(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(None)
