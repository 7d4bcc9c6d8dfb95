"""The stream reader's lifetime: it holds the file's map (and the descriptor the map keeps)
only while a pass over its records runs, so no way of reading it leaves one behind."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from netspec.datastream.reader import StreamReader, read_streams
from support import descriptors

STORED = Path(__file__).parent.parent / "data" / "streams" / "stim-v1.0.ds"


@pytest.fixture
def stream(tmp_path: Path) -> Path:
    return Path(shutil.copy(STORED, tmp_path / STORED.name))


def held(path: Path) -> list[str]:
    """This process's maps and descriptors of `path`."""
    maps = [line for line in Path("/proc/self/maps").read_text().splitlines() if line.endswith(str(path))]
    return maps + [f"fd {fd}" for fd, link in descriptors().items() if link == str(path)]


def test_a_reader_holds_the_map_only_while_a_pass_runs(stream: Path) -> None:
    with StreamReader(stream) as reader:
        assert held(stream) == [], "reading the header leaves no map"
        records = iter(reader)
        next(records)
        assert len(held(stream)) == 2, "a map and the descriptor it keeps"
        rest = list(records)
        assert rest and held(stream) == []
        assert len(list(reader)) == len(rest) + 1, "a second pass maps the file again"
    assert held(stream) == []


def test_no_way_of_reading_a_stream_leaves_its_map_behind(stream: Path) -> None:
    assert StreamReader(stream).header.stream == "stim"
    assert list(StreamReader(stream)) and held(stream) == []
    assert list(read_streams([stream, stream])) and held(stream) == []
    with StreamReader(stream) as reader:
        columns = reader.columns(compiled=False)
        next(columns)
        assert held(stream) != []
    assert held(stream) == [], "the block's end ends a pass left half read"
    reader = StreamReader(stream)
    chunks = reader.chunks()
    next(chunks)
    chunks.close()
    assert held(stream) == [], "a pass closed half read unmaps the file"
