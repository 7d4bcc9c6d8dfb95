"""The stream writer under stress: killed, terminated, forked, ring-buffered, flushed by time."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from netspec.datastream.instrument import Datastreams
from netspec.datastream.reader import StreamReader
from netspec.datastream.writer import StreamConfig, StreamInfo
from support import PROGRAMS, wait_for


def streamer(tmp_path: Path, count: int, then: str, *extra: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(PROGRAMS / "streamer.py"), str(tmp_path), str(count),
                             then, *extra], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == f"logged {count}"
    return proc


def ticks(path: Path, entity: str = "TEST/tick") -> list[int]:
    return [r.tag for r in StreamReader(path) if r.entity.full_name == entity]


def test_sigkill_loses_only_the_chunk_still_in_memory(tmp_path: Path) -> None:
    proc = streamer(tmp_path, 1050, "sleep", "--chunk", "100")
    proc.kill()
    proc.wait()
    (path,) = tmp_path.glob("*.ds")
    reader = StreamReader(path)
    got = [r.tag for r in reader if r.entity.full_name == "TEST/tick"]
    lost = 1050 - len(got)
    assert got == list(range(len(got)))
    assert lost == 50, "exactly the unfinished last chunk is gone"
    assert reader.closed_cleanly is False
    assert any("no clean close" in w for w in reader.warnings)


def test_sigterm_flushes_and_the_process_still_dies_of_sigterm(tmp_path: Path) -> None:
    proc = streamer(tmp_path, 1050, "sleep", "--chunk", "100")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGTERM
    (path,) = tmp_path.glob("*.ds")
    reader = StreamReader(path)
    assert [r.tag for r in reader if r.entity.full_name == "TEST/tick"] == list(range(1050))
    assert reader.closed_cleanly and reader.warnings == []


def test_a_normal_exit_flushes_and_closes(tmp_path: Path) -> None:
    proc = streamer(tmp_path, 7, "exit")
    assert proc.wait(timeout=10) == 0
    (path,) = tmp_path.glob("*.ds")
    reader = StreamReader(path)
    assert [r.tag for r in reader if r.entity.group == "TEST"] == list(range(7))
    assert reader.closed_cleanly is True


def test_records_wait_no_longer_than_flush_ms_in_memory(tmp_path: Path) -> None:
    proc = streamer(tmp_path, 5, "sleep", "--chunk", "1000", "--flush-ms", "20")
    try:
        (path,) = wait_for(lambda: list(tmp_path.glob("*.ds")), what="the stream file")
        wait_for(lambda: ticks(path) == list(range(5)), what="the flusher to write the chunk")
    finally:
        proc.kill()
        proc.wait()


def test_each_stream_waits_its_own_flush_ms_whatever_the_others_ask(tmp_path: Path) -> None:
    ds = Datastreams()
    tick = ds.event("T", "tick")
    fast, slow = ds.start([StreamConfig("fast", enable=("T",), flush_ms=20),
                           StreamConfig("slow", enable=("T",), flush_ms=1500)],
                          StreamInfo(tmp_path, run="r", host="h", component="c"), exit_hooks=False)
    try:
        tick.log(1)
        wait_for(lambda: ticks(fast, "T/tick") == [1], what="the fast stream's chunk")
        assert ticks(slow, "T/tick") == []
        wait_for(lambda: ticks(slow, "T/tick") == [1], what="the slow stream's chunk")
    finally:
        ds.stop()


def test_a_forked_child_writes_its_own_file_and_the_parent_loses_nothing(tmp_path: Path) -> None:
    proc = streamer(tmp_path, 250, "fork", "--chunk", "100")
    assert proc.wait(timeout=10) == 0
    files = {StreamReader(p).header["pid"]: p for p in tmp_path.glob("*.ds")}
    assert len(files) == 2
    parent = StreamReader(files[proc.pid])
    (child_pid,) = set(files) - {proc.pid}
    child = StreamReader(files[child_pid])
    assert child.header["parent_pid"] == proc.pid
    assert [r.tag for r in parent if r.entity.group == "TEST"] == [*range(250), -1]
    assert [r.tag for r in child if r.entity.group == "TEST"] == [1_000_000 + i for i in range(250)]
    assert parent.closed_cleanly and child.closed_cleanly
    assert parent.warnings == child.warnings == []


def test_a_ring_stream_writes_exactly_its_last_n_chunks_on_trigger(tmp_path: Path) -> None:
    ds = Datastreams()
    tick, fail = ds.event("T", "tick"), ds.event("T", "fail")
    (path,) = ds.start([StreamConfig("ring", enable=("T/tick",), trigger=("T/fail",),
                                     chunk_records=10, ring_chunks=3)],
                       StreamInfo(tmp_path, component="c"), exit_hooks=False)
    for i in range(95):
        tick.log(i)
    fail.log(1)
    for i in range(95, 130):  # kept in the ring, never triggered: not written
        tick.log(i)
    ds.stop()
    records = list(StreamReader(path))
    # 96 records: chunks of 10 up to tag 89, then 90-94 + the trigger event flushed at it.
    assert [r.tag for r in records if r.entity.name == "tick"] == list(range(70, 95))
    assert [r.tag for r in records if r.entity.name == "fail"] == [1]
    (trigger,) = [r for r in records if r.entity.full_name == "DS/trigger"]
    assert trigger.value == {"reason": "T/fail", "chunks": 3, "discarded_chunks": 7}
    assert records[-1].entity.full_name == "DS/close"
    assert records[-1].value["unwritten_ring_chunks"] == 4


def test_an_explicit_trigger_writes_the_ring(tmp_path: Path) -> None:
    ds = Datastreams()
    tick = ds.event("T", "tick")
    (path,) = ds.start([StreamConfig("ring", enable=("T",), chunk_records=4, ring_chunks=2)],
                       StreamInfo(tmp_path, component="c"), exit_hooks=False)
    for i in range(10):
        tick.log(i)
    ds.trigger("operator asked")
    ds.stop()
    assert ticks(path, "T/tick") == [4, 5, 6, 7, 8, 9]


def test_a_value_msgpack_cannot_carry_costs_only_its_own_record(tmp_path: Path) -> None:
    ds = Datastreams()
    tick = ds.event("T", "tick")
    (path,) = ds.start([StreamConfig("app", enable=("T",), chunk_records=10)],
                       StreamInfo(tmp_path, component="c"), exit_hooks=False)
    tick.log(1)
    tick.log(2, object())
    tick.log(3, 2**70)
    tick.log(4, {"fine": [1]})
    ds.stop()
    reader = StreamReader(path)
    records = list(reader)
    assert [r.tag for r in records if r.entity.full_name == "T/tick"] == [1, 4]
    (dropped,) = [r for r in records if r.entity.full_name == "DS/dropped"]
    assert dropped.value["records"] == 2
    assert "not MessagePack data (TypeError: Encoding objects of type object" in dropped.value["reason"]
    assert reader.records_lost == 2
