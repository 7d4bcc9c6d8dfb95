"""The instrumentation API: every entity kind round-trips, patterns choose what is logged."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from netspec.datastream.instrument import Datastreams
from netspec.datastream.reader import StreamReader
from netspec.datastream.writer import StreamConfig, StreamInfo
from netspec.protocol.errors import NetspecError


def start(ds: Datastreams, tmp_path: Path, *configs: StreamConfig) -> list[Path]:
    return ds.start(list(configs), StreamInfo(tmp_path, run="r1", host="a", component="c"),
                    exit_hooks=False)


def records(path: Path) -> list:
    return [r for r in StreamReader(path) if r.entity.group != "DS"]


def test_every_entity_kind_round_trips_with_its_data(tmp_path: Path) -> None:
    ds = Datastreams()
    plain = ds.event("STIM", "send", "a request left")
    text = ds.event("STIM", "note", decoder="utf8")
    packed = ds.event("STIM", "pair", decoder="struct:<iH")
    jsoned = ds.event("STIM", "doc", decoder="json")
    native = ds.event("STIM", "map")
    rtt = ds.interval("STIM", "rtt")
    sent = ds.counter("STIM", "bytes")
    lat = ds.histogram("STIM", "lat_us", lo=0, hi=100, buckets=4)
    cpu = ds.samples("CAMP", "cpu", ["user", "system"])
    (path,) = start(ds, tmp_path, StreamConfig("app", enable=("STIM", "CAMP/*")))
    plain.log(1)
    text.log(2, b"hello")
    packed.log(3, struct.pack("<iH", -5, 7))
    jsoned.log(4, b'{"a": [1, 2]}')
    native.log(5, {"k": [1, "x"]})
    begun = rtt.start()
    rtt.end(6)
    rtt.end(7, start_ns=begun - 1000)
    sent.add(10)
    sent.add(5)
    sent.log()
    sent.reset()
    sent.log()
    for v in (-1, 0, 24.9, 25, 99.9, 100, 500):
        lat.add(v)
    lat.log()
    cpu.log([1.5, 0.25], ts=123)
    ds.stop()

    got = records(path)
    assert [(r.entity.full_name, r.tag, r.value) for r in got[:5]] == [
        ("STIM/send", 1, None), ("STIM/note", 2, "hello"), ("STIM/pair", 3, (-5, 7)),
        ("STIM/doc", 4, {"a": [1, 2]}), ("STIM/map", 5, {"k": [1, "x"]})]
    first, second = got[5], got[6]
    assert first.entity.kind == "interval" and first.tag == 6 and first.start == begun
    assert first.value == first.ts - begun >= 0
    assert second.start == begun - 1000 and second.value == second.ts - second.start
    assert [r.value for r in got[7:9]] == [15, 0]
    assert got[9].value == {"counts": [1, 2, 1, 0, 1, 2], "sum": 0 + 24.9 + 25 + 99.9 + 100 + 500 - 1}
    assert got[9].entity.spec == {"lo": 0, "hi": 100, "buckets": 4}
    assert (got[10].ts, got[10].value) == (123, {"user": 1.5, "system": 0.25})
    assert got[0].entity.desc == "a request left"
    assert all(r.source.header.component == "c" and r.source.header.run == "r1" for r in got)


def test_patterns_enable_groups_globs_and_disable_exceptions(tmp_path: Path) -> None:
    ds = Datastreams()
    names = [("PIPE", "send"), ("PIPE", "recv"), ("PIPE", "debug"), ("STIM", "send"), ("X", "y")]
    entities = {f"{g}/{n}": ds.event(g, n) for g, n in names}
    (path,) = start(ds, tmp_path, StreamConfig("app", enable=("PIPE", "*/send"),
                                               disable=("PIPE/debug",)))
    for e in entities.values():
        e.log(0)
    assert {k for k, e in entities.items() if e.enabled} == {"PIPE/send", "PIPE/recv", "STIM/send"}
    ds.stop()
    assert [r.entity.full_name for r in records(path)] == ["PIPE/send", "PIPE/recv", "STIM/send"]
    assert not any(e.enabled for e in entities.values())


def test_an_entity_declared_after_start_is_matched_and_named_before_its_first_record(
        tmp_path: Path) -> None:
    ds = Datastreams()
    (path,) = start(ds, tmp_path, StreamConfig("app", enable=("LATE/*",)))
    late = ds.event("LATE", "one")
    late.log(9)
    ds.stop()
    reader = StreamReader(path)
    assert [(r.entity.full_name, r.tag) for r in records(path)] == [("LATE/one", 9)]
    assert reader.warnings == []


def test_an_entity_is_logged_to_every_stream_that_enables_it(tmp_path: Path) -> None:
    ds = Datastreams()
    both, only_b = ds.event("G", "both"), ds.counter("G", "b")
    a, b = start(ds, tmp_path, StreamConfig("a", enable=("G/both",)), StreamConfig("b", enable=("G",)))
    both.log(1)
    only_b.add(2)
    only_b.log()
    ds.stop()
    assert [r.entity.full_name for r in records(a)] == ["G/both"]
    assert [(r.entity.full_name, r.value) for r in records(b)] == [("G/both", None), ("G/b", 2)]


def test_a_disabled_entity_writes_nothing_and_counts_nothing(tmp_path: Path) -> None:
    ds = Datastreams()
    off, count = ds.event("OFF", "e"), ds.counter("OFF", "c")
    (path,) = start(ds, tmp_path, StreamConfig("app", enable=("ON",)))
    off.log(1)
    count.add(5)
    assert count.value == 0
    ds.stop()
    assert records(path) == []


def test_redeclaring_an_entity_returns_it_unless_its_kind_differs() -> None:
    ds = Datastreams()
    assert ds.event("G", "e") is ds.event("G", "e")
    with pytest.raises(NetspecError, match="G/e is already declared as a event"):
        ds.counter("G", "e")
    with pytest.raises(NetspecError, match="without '/'"):
        ds.event("G/x", "e")
    with pytest.raises(NetspecError, match="lo < hi"):
        ds.histogram("G", "h", lo=5, hi=5, buckets=3)


def test_a_second_logging_window_writes_a_new_file_and_keeps_the_first(tmp_path: Path) -> None:
    ds = Datastreams()
    tick = ds.event("T", "tick")
    config = StreamConfig("app", enable=("T",))
    (first,) = start(ds, tmp_path, config)
    tick.log(1)
    ds.stop()
    (second,) = start(ds, tmp_path, config)
    tick.log(2)
    ds.stop()
    assert first != second and second.name.endswith("-2.ds")
    assert [r.tag for r in records(first)] == [1]
    assert [r.tag for r in records(second)] == [2]


def test_pause_and_resume_keep_one_file_and_declare_each_entity_once(tmp_path: Path) -> None:
    ds = Datastreams()
    tick = ds.event("T", "tick")
    (path,) = ds.start([StreamConfig("node", enable=("T",))], StreamInfo(tmp_path, component="n"),
                       exit_hooks=False, paused=True)
    tick.log(0)
    ds.resume()
    tick.log(1)
    ds.pause()
    tick.log(2)
    ds.resume()
    tick.log(3)
    ds.resume()  # a second start_logging in a row: nothing to enable again
    tick.log(4)
    ds.stop()
    assert [r.tag for r in records(path)] == [1, 3, 4]
    namespace_chunks = path.read_bytes().count(b"tick")
    assert namespace_chunks == 1
