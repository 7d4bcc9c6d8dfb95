"""Frames on the wire: a 4-byte big-endian length, then one msgpack map; once a
connection is authenticated, each frame's body is followed by a MAC tag (see `Seal`).

Pure: feed bytes in, get messages out; it never touches a socket, so the same decoder
serves the controller-daemon TCP connection and the daemon-component socketpair.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import Any

import msgpack

from .errors import ProtocolError

HEADER = struct.Struct(">I")
MAX_FRAME = 16 * 1024 * 1024
TAG_BYTES = 16
_SEQ = struct.Struct(">Q")


class Seal:
    """One direction of an authenticated connection: frame number n carries the keyed
    BLAKE2b of (direction, n, body), TAG_BYTES long. BLAKE2b is a MAC of its own when keyed
    (RFC 7693), and cheaper than HMAC-SHA256: among 100 processes on two cores that only
    carry frames, a process's step took 64 us with it against 78 (bench/RESULTS.md).

    The number is never sent; each side counts. So a frame injected, replayed, dropped or
    reordered by anyone on the path fails the check of the frame it lands on.
    """

    def __init__(self, key: bytes, direction: bytes):
        self._mac = hashlib.blake2b(direction, key=key, digest_size=TAG_BYTES)
        self.sequence = 0

    def tag(self, body: bytes) -> bytes:
        mac = self._mac.copy()
        mac.update(_SEQ.pack(self.sequence))
        mac.update(body)
        self.sequence += 1
        return mac.digest()


class Packed(bytes):
    """A field's value already encoded as msgpack: `encode` joins it as it is, so that a
    large value sent again and again (a fan-out tree's enter for a subtree, step after
    step) is encoded once. The frame on the wire is the one the value itself would make."""


def encode(message: dict[str, Any], seal: Seal | None = None) -> bytes:
    """Return the frame carrying `message` (a map with at least a "t" key), tagged by
    `seal` on an authenticated connection."""
    if Packed in map(type, message.values()):
        body = _map_header(len(message)) + b"".join(
            _pack(key) + (value if isinstance(value, Packed) else _pack(value))
            for key, value in message.items())
    else:
        body = _pack(message)
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"message of {len(body)} bytes exceeds the {MAX_FRAME}-byte frame limit")
    if seal is None:
        return HEADER.pack(len(body)) + body
    return HEADER.pack(len(body) + TAG_BYTES) + body + seal.tag(body)


def packed(value: Any) -> Packed:
    return Packed(_pack(value))


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def _map_header(size: int) -> bytes:
    if size < 16:
        return bytes([0x80 | size])
    return b"\xde" + struct.pack(">H", size) if size < 1 << 16 else b"\xdf" + struct.pack(">I", size)


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
        self.seal: Seal | None = None
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buffer += data
        messages = []
        while len(self._buffer) >= HEADER.size:
            (length,) = HEADER.unpack_from(self._buffer)
            tag_bytes = TAG_BYTES if self.seal is not None else 0
            if length > self.max_frame + tag_bytes:
                raise ProtocolError(f"frame of {length} bytes exceeds the {self.max_frame}-byte limit")
            if length < tag_bytes:
                raise ProtocolError(f"frame of {length} bytes is shorter than its MAC tag")
            end = HEADER.size + length
            if len(self._buffer) < end:
                break
            body = bytes(self._buffer[HEADER.size:end - tag_bytes])
            if self.seal is not None and not hmac.compare_digest(
                    self.seal.tag(body), bytes(self._buffer[end - tag_bytes:end])):
                raise ProtocolError(f"frame {self.seal.sequence - 1} failed its MAC check "
                                    "(injected, replayed, reordered or damaged on the way)")
            del self._buffer[:end]
            messages.append(decode_body(body))
        return messages

    @property
    def pending(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buffer)
