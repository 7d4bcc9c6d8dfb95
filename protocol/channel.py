"""Message channels over sockets: asyncio for daemon and controller, blocking for components.

Both use the pure FrameDecoder of wire.py; after a ProtocolError the connection is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from typing import Any

from .errors import ConnectionLost, ProtocolError
from .wire import MAX_FRAME, FrameDecoder, Seal, encode

READ_SIZE = 256 * 1024


class Channel:
    """An asyncio message channel; `recv` returns None at a clean end of stream."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 peer: str = "", max_frame: int = MAX_FRAME):
        self.reader, self.writer, self.peer = reader, writer, peer
        self.decoder = FrameDecoder(max_frame)
        self._ready: deque[dict[str, Any]] = deque()
        self._seal: Seal | None = None

    def seal(self, outgoing: Seal, incoming: Seal) -> None:
        """From now on every frame is tagged and every frame received must carry its tag."""
        self._seal, self.decoder.seal = outgoing, incoming

    async def recv(self) -> dict[str, Any] | None:
        while not self._ready:
            data = await self.reader.read(READ_SIZE)
            if not data:
                if self.decoder.pending:
                    raise ProtocolError("connection closed inside a frame", self.peer)
                return None
            try:
                self._ready.extend(self.decoder.feed(data))
            except ProtocolError as exc:
                raise ProtocolError(str(exc), self.peer) from exc
        return self._ready.popleft()

    def send(self, message: dict[str, Any]) -> None:
        """Queue one message; call `drain` where back-pressure matters."""
        if self.writer.is_closing():
            raise ConnectionLost(self.peer, detail="connection is closed")
        self.writer.write(encode(message, self._seal))

    async def drain(self) -> None:
        try:
            await self.writer.drain()
        except (ConnectionError, OSError) as exc:
            raise ConnectionLost(self.peer, detail=str(exc)) from exc

    async def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


class BlockingChannel:
    """The component side of the daemon socketpair: plain blocking socket I/O."""

    def __init__(self, sock: socket.socket, peer: str = "netspecd"):
        self.sock, self.peer = sock, peer
        self.decoder = FrameDecoder()
        self._ready: deque[dict[str, Any]] = deque()

    def recv(self) -> dict[str, Any] | None:
        while not self._ready:
            data = self.sock.recv(READ_SIZE)
            if not data:
                return None
            self._ready.extend(self.decoder.feed(data))
        return self._ready.popleft()

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(encode(message))

    def close(self) -> None:
        self.sock.close()
