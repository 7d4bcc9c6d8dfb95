"""The probe protocol on the wire: three fixed-size UDP datagrams, each ending in a MAC.

request  (client -> server, REQUEST_SIZE bytes, zero padded)   magic, version, type, seq
reply    (server -> client)  + t2 (kernel RX of the request, 0 if none), u2, u3 (user space)
followup (server -> client)  + t3 (kernel TX of the reply, 0 if none)

Every datagram ends in TAG_BYTES of keyed BLAKE2b (a MAC by design, RFC 7693, and a third of
HMAC-SHA256's cost in Python) under the run's probe key, which the
controller hands to the server and its clients over their authenticated connections: a
server answers nobody else, and a client takes no forged answer for a clock reading.

The request is the largest datagram of an exchange, so a server never sends more bytes than
it received: a forged source address cannot turn it into an amplifier.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from typing import NamedTuple

MAGIC = b"NSCK"
VERSION = 3
REQUEST, REPLY, FOLLOWUP = 1, 2, 3
TAG_BYTES = 12
KEY_BYTES = 16
_HEAD = struct.Struct("!4sBBHI")  # magic, version, type, reserved, seq
_REPLY = struct.Struct("!4sBBHIqqq")
_FOLLOWUP = struct.Struct("!4sBBHIq")
REQUEST_SIZE = 48
assert max(_REPLY.size, _FOLLOWUP.size) + TAG_BYTES <= REQUEST_SIZE


class Reply(NamedTuple):
    seq: int
    t2: int | None
    u2: int
    u3: int


class Followup(NamedTuple):
    seq: int
    t3: int | None


def _tag(key: bytes, data: bytes) -> bytes:
    return hashlib.blake2b(data, key=key, digest_size=TAG_BYTES).digest()


def _signed(key: bytes, data: bytes) -> bytes:
    return data + _tag(key, data)


def _verified(key: bytes, data: bytes) -> bytes | None:
    """The datagram without its tag if the tag is right, else None."""
    body, tag = data[:-TAG_BYTES], data[-TAG_BYTES:]
    return body if len(data) > TAG_BYTES and hmac.compare_digest(tag, _tag(key, body)) else None


def request(key: bytes, seq: int) -> bytes:
    return _signed(key, _HEAD.pack(MAGIC, VERSION, REQUEST, 0, seq).ljust(REQUEST_SIZE - TAG_BYTES, b"\0"))


def request_seq(key: bytes, data: bytes) -> int | None:
    """The sequence number of a well-formed request signed with `key`, else None."""
    if len(data) != REQUEST_SIZE or (body := _verified(key, data)) is None:
        return None
    magic, version, kind, _, seq = _HEAD.unpack_from(body)
    return seq if (magic, version, kind) == (MAGIC, VERSION, REQUEST) else None


def reply(key: bytes, seq: int, t2: int | None, u2: int, u3: int) -> bytes:
    return _signed(key, _REPLY.pack(MAGIC, VERSION, REPLY, 0, seq, t2 or 0, u2, u3))


def followup(key: bytes, seq: int, t3: int | None) -> bytes:
    return _signed(key, _FOLLOWUP.pack(MAGIC, VERSION, FOLLOWUP, 0, seq, t3 or 0))


def parse(key: bytes, data: bytes) -> Reply | Followup | None:
    """A server's datagram signed with `key`, or None for anything else."""
    body = _verified(key, data)
    if body is None or len(body) < _HEAD.size:
        return None
    magic, version, kind, _, seq = _HEAD.unpack_from(body)
    if magic != MAGIC or version != VERSION:
        return None
    if kind == REPLY and len(body) == _REPLY.size:
        t2, u2, u3 = _REPLY.unpack(body)[5:]
        return Reply(seq, t2 or None, u2, u3)
    if kind == FOLLOWUP and len(body) == _FOLLOWUP.size:
        return Followup(seq, _FOLLOWUP.unpack(body)[5] or None)
    return None
