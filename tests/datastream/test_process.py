"""The process's streams (datastream/process.py): the flusher thread is owned by the open
streams and ends, joined, with the last one's close; a closed stream leaves no descriptor
open."""

from __future__ import annotations

from pathlib import Path

from netspec.datastream import process
from netspec.datastream.reader import StreamReader
from netspec.datastream.writer import Stream, StreamConfig, StreamInfo
from support import descriptors, threads_named


def flushers() -> list:
    return threads_named("netspec-flusher")


def open_files(directory: Path) -> list[str]:
    """This process's descriptors open on files under `directory`."""
    return [link for link in descriptors().values() if link.startswith(str(directory))]


def test_the_last_stream_to_close_ends_the_flusher_and_leaves_no_descriptor(tmp_path: Path) -> None:
    process.close_all()  # streams an earlier test of this process left open
    first = Stream(StreamConfig("a", flush_ms=20), StreamInfo(tmp_path, component="c"))
    second = Stream(StreamConfig("b"), StreamInfo(tmp_path, component="c"))
    assert len(flushers()) == 1 and len(open_files(tmp_path)) == 2
    first.close()
    assert len(flushers()) == 1, "a stream still open keeps the flusher"
    second.close()
    assert flushers() == [] and open_files(tmp_path) == []
    with StreamReader(first.path) as reader:
        assert [r.entity.name for r in reader] == ["close"] and reader.closed_cleanly


def test_a_stream_opened_after_the_flusher_ended_gets_a_new_one(tmp_path: Path) -> None:
    process.close_all()
    with Stream(StreamConfig("a"), StreamInfo(tmp_path, component="c")):
        assert len(flushers()) == 1
    assert flushers() == []
    Stream(StreamConfig("a", flush_ms=10), StreamInfo(tmp_path, component="c"))
    try:
        assert len(flushers()) == 1
    finally:
        process.close_all()
    assert flushers() == [] and open_files(tmp_path) == []
