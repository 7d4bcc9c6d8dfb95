"""Frames on the wire: a 4-byte big-endian length, then one msgpack map; once a
connection is authenticated, each frame's body is followed by a MAC tag (see `Seal`).

Pure: feed bytes in, get messages out; it never touches a socket, so the same decoder
serves the controller-daemon TCP connection and the daemon-component socketpair.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import msgpack

from .errors import ProtocolError

TYPE_CHECKING = False  # typing's own flag, without importing typing: a program's start (nodelib's imports)
if TYPE_CHECKING:
    from typing import Any

    import msgspec

HEADER = struct.Struct(">I")
MAX_FRAME = 16 * 1024 * 1024
TAG_BYTES = 16
_SEQ = struct.Struct(">Q")
# The most objects (maps, arrays, strings, numbers...) one frame may decode to. An object
# costs 1 byte on the wire and 30 to 60 in Python (an empty array: 1 byte, 64 with its
# slot), so a frame is walked and counted before it is built: 3.8 MiB of empty arrays once
# took a daemon's peak memory 284 MiB higher (issue 38 saw 266 MiB of it kept); 11 MiB now,
# the frame's own bytes. The largest legitimate frames are a fan-out tree's (an enter's
# `hosts` at 10,000 hosts: some 20,000 objects; a batch of 10,000 acks unsummarized: some
# 190,000); the rest are bytes (read, summary records).
MAX_OBJECTS = 1 << 19
# Bodies up to this size are not walked first: they cannot make more than this many
# objects (a few MiB, freed with the message), and every step's frames are this small.
WALK_FROM = 64 * 1024


class Seal:
    """One direction of an authenticated connection: frame number n carries the keyed
    BLAKE2b of (direction, n, body), TAG_BYTES long. BLAKE2b is a MAC of its own when keyed
    (RFC 7693), and cheaper than HMAC-SHA256: among 100 processes on two cores that only
    carry frames, a process's step took 64 us with it against 78 (bench/RESULTS.md).

    The number is never sent; each side counts. So a frame injected, replayed, dropped or
    reordered by anyone on the path fails the check of the frame it lands on.
    """

    def __init__(self, key: bytes, direction: bytes):
        # Imported here: a component's channel is never sealed, and its start does not pay
        # for OpenSSL's bindings.
        import hashlib
        import hmac

        self._mac = hashlib.blake2b(direction, key=key, digest_size=TAG_BYTES)
        self._same = hmac.compare_digest
        self.sequence = 0

    def tag(self, body: bytes) -> bytes:
        mac = self._mac.copy()
        mac.update(_SEQ.pack(self.sequence))
        mac.update(body)
        self.sequence += 1
        return mac.digest()

    def check(self, body: bytes, tag: bytes) -> bool:
        """Whether `tag` is the next frame's, compared in constant time."""
        return self._same(self.tag(body), tag)


class Packed(bytes):
    """A field's value already encoded as msgpack: `encode` joins it as it is, so that a
    large value sent again and again (a fan-out tree's enter for a subtree, step after
    step) is encoded once. The frame on the wire is the one the value itself would make."""


def encode(message: dict[str, Any] | msgspec.Struct, seal: Seal | None = None) -> bytes:
    """Return the frame carrying `message` (a map with at least a "t" key, or a message of
    kinds.py, which is one on the wire), tagged by `seal` on an authenticated connection."""
    if isinstance(message, dict) and Packed in map(type, message.values()):
        body = _map_header(len(message)) + b"".join(
            _pack(key) + (value if isinstance(value, Packed) else _pack(value))
            for key, value in message.items())
    else:
        body = _pack(message)
    return _frame(body, seal)


def encode_plain(message: dict[str, Any]) -> bytes:
    """Return the frame carrying `message`, a map of plain values (what a component sends
    its daemon): the bytes `encode` makes of it, packed by the msgpack package, so that a
    component never loads msgspec (its import alone is a third of a program's start,
    bench/nodestart.py)."""
    return _frame(msgpack.packb(message, use_bin_type=True), None)


def _frame(body: bytes, seal: Seal | None) -> bytes:
    if len(body) > MAX_FRAME:
        raise ProtocolError(f"message of {len(body)} bytes exceeds the {MAX_FRAME}-byte frame limit")
    if seal is None:
        return HEADER.pack(len(body)) + body
    return HEADER.pack(len(body) + TAG_BYTES) + body + seal.tag(body)


def packed(value: Any) -> Packed:
    return Packed(_pack(value))


def _pack(value: Any) -> bytes:
    """msgpack's bytes, as msgpack.packb(use_bin_type=True) makes them, and a Struct of
    kinds.py as its map: msgspec's encoder, four times msgpack's speed, which this first
    call loads and puts in its own place (a component, which never encodes here, does not
    load msgspec; the daemon's and controller's later calls cost no check)."""
    global _pack
    import msgspec

    _pack = msgspec.msgpack.Encoder().encode
    return _pack(value)


def _map_header(size: int) -> bytes:
    if size < 16:
        return bytes([0x80 | size])
    return b"\xde" + struct.pack(">H", size) if size < 1 << 16 else b"\xdf" + struct.pack(">I", size)


def decode_body(body: bytes) -> dict[str, Any]:
    """Decode one frame body; anything but a map with a string "t" is a ProtocolError.

    Every length in it is bounded before anything is built: msgpack refuses any one length
    past the body's own (its default), and a body over WALK_FROM is walked first
    (`count_objects`) and refused past MAX_OBJECTS in all."""
    try:
        if len(body) > WALK_FROM:
            count_objects(body, MAX_OBJECTS)
            message = msgpack.unpackb(body, raw=False, strict_map_key=False,
                                      max_array_len=MAX_OBJECTS, max_map_len=MAX_OBJECTS)
        else:  # the step's frames: a keyword costs 0.4 us here, and bounds nothing more
            message = msgpack.unpackb(body, raw=False, strict_map_key=False)
    except ProtocolError:
        raise
    except Exception as exc:
        raise ProtocolError(f"undecodable frame body: {exc}") from exc
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise ProtocolError("frame is not a message map with a string 't'")
    return message


# msgpack's first byte: how many bytes a scalar of fixed size takes in all, or for the rest
# (None) how they are read in `count_objects`.
_FIXED: list[int | None] = [None] * 256
for _b in (*range(0x00, 0x80), *range(0xe0, 0x100), 0xc0, 0xc2, 0xc3):
    _FIXED[_b] = 1
for _b, _size in ((0xca, 5), (0xcb, 9), (0xcc, 2), (0xcd, 3), (0xce, 5), (0xcf, 9), (0xd0, 2),
                  (0xd1, 3), (0xd2, 5), (0xd3, 9), (0xd4, 3), (0xd5, 4), (0xd6, 6), (0xd7, 10),
                  (0xd8, 18)):
    _FIXED[_b] = _size
# A length that follows the first byte: its size in bytes, and whether it counts bytes
# (str, bin, ext: +1 for ext's type) or items (array: 1 each, map: 2 each).
_LENGTH = {0xc4: (1, 0), 0xc5: (2, 0), 0xc6: (4, 0), 0xc7: (1, 1), 0xc8: (2, 1), 0xc9: (4, 1),
           0xd9: (1, 0), 0xda: (2, 0), 0xdb: (4, 0)}
_ITEMS = {0xdc: (2, 1), 0xdd: (4, 1), 0xde: (2, 2), 0xdf: (4, 2)}


def count_objects(body: bytes, limit: int) -> int:
    """Walk one msgpack value in `body` without building it and return how many objects it
    holds.

    Raises:
        ProtocolError: it holds more than `limit` objects, declares more items or bytes than
            the rest of the body could hold, or uses the byte msgpack never uses (0xc1).
    """
    pos, end, objects, pending = 0, len(body), 0, 1
    while pending:
        if pos >= end:
            raise ProtocolError("frame body ends inside a value")
        pending -= 1
        objects += 1
        if objects > limit:
            raise ProtocolError(f"frame body holds more than {limit} objects")
        first = body[pos]
        size = _FIXED[first]
        if size is not None:
            pos += size
            continue
        if 0x80 <= first <= 0x9f:  # fixmap, fixarray
            pos, items = pos + 1, (first & 0x0f) * 2 if first < 0x90 else first & 0x0f
        elif 0xa0 <= first <= 0xbf:  # fixstr
            pos += 1 + (first & 0x1f)
            continue
        elif first in _LENGTH:
            width, extra = _LENGTH[first]
            pos += 1 + width + extra + int.from_bytes(body[pos + 1:pos + 1 + width], "big")
            continue
        elif first in _ITEMS:
            width, each = _ITEMS[first]
            items = each * int.from_bytes(body[pos + 1:pos + 1 + width], "big")
            pos += 1 + width
        else:
            raise ProtocolError(f"frame body holds the byte 0x{first:02x}, which msgpack never uses")
        pending += items
        if pending > end - pos:  # every item takes a byte at least
            raise ProtocolError(f"frame body declares {items} items where {end - pos} bytes are left")
    if pos > end:
        raise ProtocolError("frame body ends inside a value")
    return objects


class FrameDecoder:
    """Accumulates bytes and yields complete messages.

    After a ProtocolError the stream is unusable: the caller must drop the connection,
    because a length prefix can no longer be trusted to mark where the next frame starts.
    """

    def __init__(self, max_frame: int = MAX_FRAME, read: Callable[[bytes], Any] = decode_body):
        # What makes a body a message: a plain map, or a typed message (reading.Reader).
        self.max_frame, self.read = max_frame, read
        self.seal: Seal | None = None
        self._buffer = bytearray()

    def feed(self, data: bytes, most: int | None = None) -> list[Any]:
        """Take `data`; return the messages it completes, `most` of them at most: the rest
        stay in the buffer, undecoded, for a later `feed` (the handshake's, auth.py: frames
        after its own are decoded only under the seal it sets)."""
        self._buffer += data
        messages: list[Any] = []
        while len(self._buffer) >= HEADER.size and (most is None or len(messages) < most):
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
            if self.seal is not None and not self.seal.check(body, bytes(self._buffer[end - tag_bytes:end])):
                raise ProtocolError(f"frame {self.seal.sequence - 1} failed its MAC check "
                                    "(injected, replayed, reordered or damaged on the way)")
            del self._buffer[:end]
            messages.append(self.read(body))
        return messages

    @property
    def whole(self) -> bool:
        """Whether the bytes received hold a whole frame not yet decoded."""
        return (len(self._buffer) >= HEADER.size
                and len(self._buffer) >= HEADER.size + HEADER.unpack_from(self._buffer)[0])

    @property
    def pending(self) -> int:
        """Bytes received that do not yet form a whole frame."""
        return len(self._buffer)
