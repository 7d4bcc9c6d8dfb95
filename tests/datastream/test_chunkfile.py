"""A stream file read as its chunks alone (datastream.chunkfile), records left undecoded: each
chunk checked, a damaged one's loss counted from its frame, a repeated one read once, and a
file without a close record said."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from netspec.datastream.chunkfile import ChunkFile
from netspec.datastream.format import HEADER_MAGIC, SYNC, chunk_crc
from netspec.protocol.errors import StreamError

_encode = msgspec.msgpack.encode
T0 = 1_700_000_000_000_000_000
HEADER = _encode({"magic": HEADER_MAGIC, "version": [1, 0], "stream": "s", "run": "r", "host": "h",
                  "component": "c", "pid": 7, "created_ns": T0, "mode": "normal", "ring_chunks": 0,
                  "chunk_records": 100})


def frame(seq: int, records: list[Any]) -> bytes:
    body = _encode(records)
    return SYNC + _encode(seq) + _encode(len(records)) + _encode(chunk_crc(seq, len(records), body)) \
        + _encode(body)


def test_a_chunk_file_yields_its_good_chunks_and_a_damaged_ones_loss_counted_from_its_frame(
        tmp_path: Path) -> None:
    one, two, three = [[16, T0, 1]], [[16, T0 + 1, 2], [16, T0 + 2, 3]], [[16, T0 + 3, 4]]
    damaged = bytearray(frame(2, two))
    damaged[-2] ^= 0xFF  # in its body: it fails its CRC
    path = tmp_path / "s.c.7.ds"
    path.write_bytes(HEADER + frame(1, one) + bytes(damaged) + frame(3, three) + frame(3, three))
    with ChunkFile(path) as chunks:
        read = list(chunks.chunks())
    assert read[0] == (1, one) and read[2] == (3, three) and len(read) == 3
    seq, loss = read[1]
    assert seq is None and loss["records"] == 2 and "chunk 2 fails its CRC" in loss["reason"]
    assert chunks.records_lost == 2 and chunks.duplicate_chunks == 1
    assert chunks.closed_cleanly is False  # the chunks hold no close record
    said = "\n".join(chunks.warnings)
    assert "lost 2 records" in said and "appear more than once" in said and "no clean close record" in said
    assert chunks.header.stream == "s"


def test_a_file_that_is_no_stream_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"not a stream at all")
    with pytest.raises(StreamError, match="not a netspec datastream"):
        ChunkFile(path)
