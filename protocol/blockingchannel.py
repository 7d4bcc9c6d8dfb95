"""The component's end of the daemon socketpair: blocking reads and writes of its file
descriptor, frames by wire.py.

What a NETSPEC-aware program loads to talk to its daemon, and so kept to os and msgpack: no
asyncio, no msgspec, not even the socket module (its enums cost some 10 ms, near a third of
bare Python's start; bench/nodestart.py, tests/nodelib/test_start_cost.py).
"""

from __future__ import annotations

import os
from collections import deque

from .wire import FrameDecoder, encode_plain

TYPE_CHECKING = False  # typing's own flag, without importing typing: a program's start (nodelib's imports)
if TYPE_CHECKING:
    from typing import Any

# A component's read: under glibc's mmap threshold (128 KiB), which a read of 256 KiB is over
# in a process whose allocator has not raised it yet: mapped and unmapped at every read, 20 us.
READ_SIZE = 64 * 1024


class BlockingChannel:
    """The component side of the daemon socketpair: plain blocking I/O on its descriptor.

    Lifecycle: made over a connected socket's file descriptor, which it owns; `close` (or
    leaving its `with`) closes it and may be called twice."""

    def __init__(self, fd: int, peer: str = "netspecd"):
        self.fd, self.peer = fd, peer
        self.decoder = FrameDecoder()
        self._ready: deque[dict[str, Any]] = deque()

    def __enter__(self) -> BlockingChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def recv(self) -> dict[str, Any] | None:
        while not self._ready:
            data = os.read(self.fd, READ_SIZE)
            if not data:
                return None
            self._ready.extend(self.decoder.feed(data))
        return self._ready.popleft()

    def send(self, message: dict[str, Any]) -> None:
        frame = memoryview(encode_plain(message))
        while frame:
            frame = frame[os.write(self.fd, frame):]

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)
