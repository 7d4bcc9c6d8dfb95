"""The datastream format's constants and chunk framing, shared by the writer and the reader
(docs/stream-format.md is the reference).

A file is a sequence of MessagePack objects: a header map, then chunks. A chunk is the
array [CHUNK_MAGIC, seq, count, crc32, body], where body is the MessagePack encoding of
`count` records. Records are arrays led by an entity id; ids below FIRST_ENTITY_ID are the
stream's own (namespace, dropped, trigger, close).
"""

# Format version history (readers accept every older minor version of their major):
#   1.0: header map; chunks [magic, seq, count, crc32, body]; admin records 0-3.
#   1.1: the operation record (schema.OperationRecord); a histogram's spec may say
#        `scale: log` (log buckets, datastream/loghist.py). A 1.0 reader skips what it
#        does not know as an unknown kind.

from __future__ import annotations

import struct
import zlib

FORMAT_VERSION = (1, 1)
HEADER_MAGIC = "netspec-datastream"
CHUNK_MAGIC = b"NSDC"
CLOCK = "CLOCK_REALTIME"
# A chunk begins: fixarray(5), bin8 of length 4, the magic; a reader resynchronises on it.
SYNC = b"\x95\xc4\x04" + CHUNK_MAGIC

# Admin record ids; application entities start at FIRST_ENTITY_ID.
NAMESPACE, DROPPED, TRIGGER, CLOSE = 0, 1, 2, 3
FIRST_ENTITY_ID = 16

DEFAULT_CHUNK_RECORDS = 4096
DEFAULT_FLUSH_MS = 100


def chunk_crc(seq: int, count: int, body: bytes) -> int:
    """CRC32 over the chunk's seq and count (8 and 4 bytes, big-endian), then its body."""
    return zlib.crc32(body, zlib.crc32(struct.pack(">QI", seq, count)))
