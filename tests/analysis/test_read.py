"""Reading streams back: damage costs only the damaged chunk, and every loss is counted."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest
from netspec.analysis.usercode import load_function
from netspec.datastream.format import SYNC
from netspec.datastream.instrument import Datastreams
from netspec.datastream.reader import StreamReader, read_streams
from netspec.datastream.writer import StreamConfig, StreamInfo
from netspec.protocol.errors import StreamError


def write_ticks(directory: Path, count: int, chunk: int = 10, name: str = "app") -> Path:
    ds = Datastreams()
    tick = ds.event("T", "tick", decoder="no_such_module:decode")
    (path,) = ds.start([StreamConfig(name, enable=("T",), chunk_records=chunk)],
                       StreamInfo(directory, component=name), exit_hooks=False)
    for i in range(count):
        tick.log(i)
    ds.stop()
    return path


def chunk_offsets(path: Path) -> list[int]:
    data, found, at = path.read_bytes(), [], 0
    while (at := data.find(SYNC, at)) != -1:
        found.append(at)
        at += 1
    return found


def read(path: Path) -> tuple[StreamReader, list[int], list]:
    reader = StreamReader(path)
    records = list(reader)
    return reader, [r.tag for r in records if r.entity.full_name == "T/tick"], \
        [r for r in records if r.entity.full_name == "DS/lost"]


def test_one_flipped_byte_loses_only_its_chunk(tmp_path: Path) -> None:
    path = write_ticks(tmp_path, 100)
    offsets = chunk_offsets(path)  # [namespace, ticks 0-9, 10-19, ..., close]
    data = bytearray(path.read_bytes())
    data[offsets[4] + 30] ^= 0x40  # inside the body of ticks 30-39
    path.write_bytes(bytes(data))
    reader, got, lost = read(path)
    assert got == [*range(30), *range(40, 100)]
    assert [r.value["records"] for r in lost] == [10]
    assert reader.records_lost == 10
    assert any("lost 10 records: chunk 5 fails its CRC" in w for w in reader.warnings)
    assert reader.closed_cleanly is True


def test_a_damaged_chunk_marker_is_skipped_and_still_counted(tmp_path: Path) -> None:
    path = write_ticks(tmp_path, 100)
    offsets = chunk_offsets(path)
    data = bytearray(path.read_bytes())
    data[offsets[2] + 3] ^= 0xFF  # the magic of ticks 10-19: the frame itself is unreadable
    path.write_bytes(bytes(data))
    reader, got, lost = read(path)
    assert got == [*range(10), *range(20, 100)]
    assert [r.value["records"] for r in lost] == [10]
    assert any("lost 10 records: no chunk marker" in w for w in reader.warnings)


def test_a_truncated_file_ends_at_its_last_whole_chunk_and_counts_the_cut_one(tmp_path: Path) -> None:
    path = write_ticks(tmp_path, 100)
    offsets = chunk_offsets(path)
    path.write_bytes(path.read_bytes()[:offsets[7] + 40])  # cut inside ticks 60-69
    reader, got, lost = read(path)
    assert got == list(range(60))
    assert [r.value["records"] for r in lost] == [10]
    assert "file ends inside chunk 8" in lost[0].value["reason"]
    assert reader.closed_cleanly is False


def test_a_file_cut_inside_its_header_or_of_another_kind_is_refused(tmp_path: Path) -> None:
    path = write_ticks(tmp_path, 5)
    path.write_bytes(path.read_bytes()[:20])
    with pytest.raises(StreamError, match="not a netspec datastream"):
        StreamReader(path)
    other = tmp_path / "other.ds"
    other.write_bytes(msgspec.msgpack.encode({"hello": 1}))
    with pytest.raises(StreamError, match="bad header magic"):
        StreamReader(other)


def test_a_damaged_header_costs_only_the_header_the_chunks_after_it_are_read(tmp_path: Path) -> None:
    path = write_ticks(tmp_path, 100, name="app")
    data = bytearray(path.read_bytes())
    data[2:8] = b"XXXXXX"  # inside the header's magic
    path.write_bytes(bytes(data))
    reader, got, lost = read(path)
    assert got == list(range(100)) and not lost and reader.records_lost == 0
    assert reader.header.stream == "app" and reader.header_damaged
    assert any("the header is damaged (bad header magic): read from the first chunk on" in w
               for w in reader.warnings)


def test_a_chunk_written_twice_is_read_once_and_counted(tmp_path: Path) -> None:
    path = write_ticks(tmp_path, 30)
    offsets = chunk_offsets(path)  # [namespace, ticks 0-9, 10-19, 20-29, close]
    data = path.read_bytes()
    path.write_bytes(data[:offsets[3]] + data[offsets[2]:offsets[3]] + data[offsets[3]:])
    reader, got, lost = read(path)
    assert got == list(range(30)) and not lost
    assert reader.duplicate_chunks == 1
    assert any("1 chunk(s) appear more than once: each read once" in w for w in reader.warnings)


def test_a_newer_major_format_is_refused_with_a_clear_message(tmp_path: Path) -> None:
    path = tmp_path / "future.ds"
    path.write_bytes(msgspec.msgpack.encode({"magic": "netspec-datastream", "version": [2, 0]}))
    with pytest.raises(StreamError, match=r"stream format 2\.0 is newer than this netspec reads \(1\.x\)"):
        StreamReader(path)


def test_a_newer_minor_format_is_read(tmp_path: Path) -> None:
    path = write_ticks(tmp_path, 3)
    data = path.read_bytes()
    header = msgspec.msgpack.decode(data[:data.find(SYNC)])
    header["version"] = [1, 7]
    header["added_later"] = True
    path.write_bytes(msgspec.msgpack.encode(header) + data[data.find(SYNC):])
    _, got, _ = read(path)
    assert got == [0, 1, 2]


def test_an_unavailable_decoder_keeps_the_data_raw_and_says_so(tmp_path: Path) -> None:
    path = write_ticks(tmp_path, 1)
    reader, got, _ = read(path)
    assert got == [0]
    assert any("decoder 'no_such_module:decode' unavailable (not built in, and not allowed" in w
               for w in reader.warnings)


def test_a_decoder_a_stream_names_is_never_imported_unless_the_user_allows_it(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    (tmp_path / "evil.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                      "def decode(d):\n    return 'decoded'\n")
    ds = Datastreams()
    event = ds.event("T", "tick", decoder="evil:decode")
    (path,) = ds.start([StreamConfig("s", enable=("T",))], StreamInfo(tmp_path, component="s"),
                       exit_hooks=False)
    event.log(1, b"raw")
    ds.stop()
    sys.path.insert(0, str(tmp_path))
    try:
        records = [r for r in StreamReader(path) if r.entity.full_name == "T/tick"]
        assert records[0].value == b"raw" and not marker.exists()  # the file's word is not enough
        allowed = {"evil:decode": load_function("evil:decode", tmp_path, "decoder")}
        assert marker.exists()  # the user's own choice: it runs
        records = [r for r in StreamReader(path, allowed) if r.entity.full_name == "T/tick"]
        assert records[0].value == "decoded"
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("evil", None)


def test_many_files_merge_in_time_order(tmp_path: Path) -> None:
    a = write_ticks(tmp_path, 20, name="a")
    b = write_ticks(tmp_path, 20, name="b")
    readers: list[StreamReader] = []
    merged = [r for r in read_streams([a, b], readers) if r.entity.group == "T"]
    assert len(merged) == 40 and len(readers) == 2
    assert [r.ts for r in merged] == sorted(r.ts for r in merged)
    assert {r.source.header.stream for r in merged} == {"a", "b"}


@pytest.mark.parametrize("way", ["records", "chunks", "columns", "compiled columns"])
def test_every_way_of_reading_says_a_stream_has_no_clean_close(tmp_path: Path, way: str) -> None:
    path = write_ticks(tmp_path, 30)
    path.write_bytes(path.read_bytes()[:chunk_offsets(path)[-1]])  # the close record's chunk cut off
    with StreamReader(path) as reader:
        ways = {"records": lambda: reader, "chunks": reader.chunks, "columns": lambda: reader.columns(False),
                "compiled columns": reader.columns}
        for _ in ways[way]():
            pass
    assert reader.closed_cleanly is False
    assert [w for w in reader.warnings if "no clean close record" in w] != []
