"""Frames on the wire: a 4-byte big-endian length, then one msgpack map.

Pure: feed bytes in, get messages out; it never touches a socket, so the same decoder
serves the controller-daemon TCP connection and the daemon-component socketpair.
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack

from .errors import ProtocolError

HEADER = struct.Struct(">I")
MAX_FRAME = 16 * 1024 * 1024


def encode(message: dict[str, Any]) -> bytes:
    """Return the frame carrying `message` (a map with at least a "t" key)."""
    body = msgpack.packb(message, use_bin_type=True)
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"message of {len(body)} bytes exceeds the {MAX_FRAME}-byte frame limit")
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict[str, Any]:
    """Decode one frame body; anything but a map with a string "t" is a ProtocolError."""
    try:
        message = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except Exception as exc:
        raise ProtocolError(f"undecodable frame body: {exc}") from exc
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise ProtocolError("frame is not a message map with a string 't'")
    return message


class FrameDecoder:
    """Accumulates bytes and yields complete messages.

    After a ProtocolError the stream is unusable: the caller must drop the connection,
    because a length prefix can no longer be trusted to mark where the next frame starts.
    """

    def __init__(self, max_frame: int = MAX_FRAME):
        self.max_frame = max_frame
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        messages = []
        while len(self._buffer) >= HEADER.size:
            (length,) = HEADER.unpack_from(self._buffer)
            if length > self.max_frame:
                raise ProtocolError(f"frame of {length} bytes exceeds the {self.max_frame}-byte limit")
            end = HEADER.size + length
            if len(self._buffer) < end:
                break
            body = bytes(self._buffer[HEADER.size:end])
            del self._buffer[:end]
            messages.append(decode_body(body))
        return messages

    @property
    def pending(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buffer)
