"""The stream reader fuzzed with valid checksums around bad contents (tests/streamfuzz.py):
read every way netspec reads a stream (dump, columns by the scanner and the unpacker, the
merge's source), nothing but a whole file refused for what it is may be raised (issue 38)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from netspec.datastream.format import FORMAT_VERSION, HEADER_MAGIC, SYNC
from netspec.datastream.reader import StreamReader
from streamfuzz import TS, chunk, craft, read_all, write


class HypothesisChooser:
    def __init__(self, data: st.DataObject):
        self.data = data

    def int(self, lo: int, hi: int) -> int:
        return self.data.draw(st.integers(lo, hi))

    def bytes(self, n: int) -> bytes:
        return self.data.draw(st.binary(min_size=n, max_size=n))


# Bounded (~5 s here): no shrinking, whose length has no bound; the example that failed is
# printed as hypothesis drew it.
@settings(max_examples=300, deadline=None, derandomize=True, database=None, phases=[Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_crafted_stream_is_read_every_way_without_a_crash(data, tmp_path):
    file = craft(HypothesisChooser(data))
    assert read_all(write(tmp_path, file)) == {}, file.hex()


def _header(**fields: Any) -> bytes:
    return msgpack.packb({"magic": HEADER_MAGIC, "version": list(FORMAT_VERSION), "stream": "fz",
                          "component": "fz", "created_ns": TS, "mode": "normal", **fields}, use_bin_type=True)


def _stream(*chunks: list[Any], header: bytes | None = None) -> bytes:
    """A well-formed file of these chunks' records, closed cleanly."""
    bodies = [*chunks, [[3, TS, sum(map(len, chunks)), len(chunks) + 1, 0]]]
    return (_header() if header is None else header) + b"".join(
        chunk(seq, len(records), msgpack.packb(records, use_bin_type=True))
        for seq, records in enumerate(bodies, 1))


def _said(path: Path) -> list[str]:
    reader = StreamReader(path)
    list(reader)
    return reader.warnings


EVENT = [0, TS, 16, "event", "FZ", "e", "", None, {}]


def test_a_good_stream_reads_whole(tmp_path):
    path = write(tmp_path, _stream([EVENT, [16, TS, 1, 5]]))
    assert read_all(path) == {}
    assert _said(path) == []


def test_a_bare_chunk_marker_at_the_end_is_a_loss_said_not_a_crash(tmp_path):
    path = write(tmp_path, _stream([EVENT, [16, TS, 1, 5]]) + SYNC)
    assert read_all(path) == {}
    assert _said(path)


def test_a_bit_flipped_in_the_header_costs_the_header_at_most(tmp_path):
    good = _stream([EVENT, [16, TS, 1, 5]])
    at = good.index(b"version") + len(b"version")  # the array of [major, minor]
    crashes = {}
    for offset in range(at, at + 3):
        for bit in range(8):
            flipped = good[:offset] + bytes([good[offset] ^ (1 << bit)]) + good[offset + 1:]
            crashes.update(read_all(write(tmp_path, flipped, offset * 8 + bit)))
    assert crashes == {}


@pytest.mark.parametrize(("decoder", "data"), [
    ("json", b"{not json"), ("json", b"\xff"), ("json", 7), ("utf8", b"\xff\xfe"),
    ("struct:<I", b"\x01"), ("struct:<I", "text"), ("struct:<Id", b"\x00" * 4),
])
def test_event_data_that_does_not_fit_its_decoder_breaks_neither_dump_nor_the_merge(tmp_path, decoder, data):
    declare = [0, TS, 16, "event", "FZ", "e", "", decoder, {}]
    path = write(tmp_path, _stream([declare, [16, TS, 1, data], [16, TS + 1, 2, b"x"]]))
    assert read_all(path) == {}
    assert _said(path)  # never silent: the record kept raw, or skipped, is said


def test_a_chunk_that_declares_more_records_than_any_file_holds_allocates_nothing(tmp_path):
    body = msgpack.packb([[16, TS, 1]], use_bin_type=True)
    path = write(tmp_path, _header() + chunk(1, 2**31, body) + _stream([EVENT])[len(_header()):])
    assert read_all(path) == {}


@pytest.mark.parametrize("record", [
    [1, TS], [3, TS, 1], [2, TS], [1, TS, "many", "why"], [0, TS, 16, "event"],
    [0, TS, 16, "histogram", "FZ", "h", "", None, {"lo": 0, "hi": 10, "buckets": 0}],
    [0, TS, 16, "samples", "FZ", "s", "", None, {"fields": 5}], [16], [], 7,
    [0, TS, [16], "event", "FZ", "e", "", None, {}],
])
def test_a_record_of_the_wrong_shape_under_a_valid_crc_is_no_crash(tmp_path, record):
    path = write(tmp_path, _stream([EVENT, record, [16, TS, 1, struct.pack("<I", 7)]]))
    assert read_all(path) == {}
