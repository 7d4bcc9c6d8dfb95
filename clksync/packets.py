"""The probe protocol on the wire: three fixed-size UDP datagrams.

request  (client -> server, REQUEST_SIZE bytes, zero padded)   magic, version, type, seq
reply    (server -> client)  + t2 (kernel RX of the request, 0 if none), u2, u3 (user space)
followup (server -> client)  + t3 (kernel TX of the reply, 0 if none)

The request is the largest datagram of an exchange, so a server never sends more bytes than
it received: a forged source address cannot turn it into an amplifier.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

MAGIC = b"NSCK"
VERSION = 1
REQUEST, REPLY, FOLLOWUP = 1, 2, 3
_HEAD = struct.Struct("!4sBBHI")  # magic, version, type, reserved, seq
_REPLY = struct.Struct("!4sBBHIqqq")
_FOLLOWUP = struct.Struct("!4sBBHIq")
REQUEST_SIZE = 48
assert max(_REPLY.size, _FOLLOWUP.size) <= REQUEST_SIZE


class Reply(NamedTuple):
    seq: int
    t2: int | None
    u2: int
    u3: int


class Followup(NamedTuple):
    seq: int
    t3: int | None


def request(seq: int) -> bytes:
    return _HEAD.pack(MAGIC, VERSION, REQUEST, 0, seq).ljust(REQUEST_SIZE, b"\0")


def request_seq(data: bytes) -> int | None:
    """The sequence number of a well-formed request, else None."""
    if len(data) != REQUEST_SIZE:
        return None
    magic, version, kind, _, seq = _HEAD.unpack_from(data)
    return seq if (magic, version, kind) == (MAGIC, VERSION, REQUEST) else None


def reply(seq: int, t2: int | None, u2: int, u3: int) -> bytes:
    return _REPLY.pack(MAGIC, VERSION, REPLY, 0, seq, t2 or 0, u2, u3)


def followup(seq: int, t3: int | None) -> bytes:
    return _FOLLOWUP.pack(MAGIC, VERSION, FOLLOWUP, 0, seq, t3 or 0)


def parse(data: bytes) -> Reply | Followup | None:
    """A server's datagram, or None for anything else."""
    if len(data) < _HEAD.size:
        return None
    magic, version, kind, _, seq = _HEAD.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        return None
    if kind == REPLY and len(data) == _REPLY.size:
        t2, u2, u3 = _REPLY.unpack(data)[5:]
        return Reply(seq, t2 or None, u2, u3)
    if kind == FOLLOWUP and len(data) == _FOLLOWUP.size:
        return Followup(seq, _FOLLOWUP.unpack(data)[5] or None)
    return None
