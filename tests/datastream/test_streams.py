"""The stream writer under stress: killed, terminated, forked, ring-buffered, flushed by time."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

from netspec.datastream.instrument import Datastreams
from netspec.datastream.reader import StreamReader
from netspec.datastream.writer import StreamConfig, StreamInfo
from support import PROGRAMS, Steal, wait_for


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


# What a chunk may take beyond its stream's flush_ms. The flusher starts with a process's
# first stream and wakes every tick (the smallest flush_ms of the open streams), writing
# each stream whose flush_ms, less half a tick, has passed since its last chunk
# (datastream/process.py): a record logged once its stream opened is written at the first
# tick flush_ms after the flusher started, then the flusher's own work (encoding and
# writing a chunk, well under a millisecond), allowed OWN_WORK_NS. On a loaded machine the
# flusher also waits for a CPU: that time, the scheduler's own account of it (and what the
# hypervisor stole meanwhile), is added to the bound rather than guessed.
HALF_TICK = 0.5
OWN_WORK_NS = 3_000_000
CLOCK_REALTIME_COARSE = 5  # <linux/time.h>; the clock of a file's stamps (not in Python's time)


def written_ns(path: Path) -> int:
    """When the stream file was last written (the kernel's stamp: CLOCK_REALTIME, as the
    records' ts are, read at its coarse resolution, so never later than the write)."""
    return path.stat().st_mtime_ns


def waited_for_cpu_ns(pid: int, but: int | None = None) -> int:
    """How long the threads of process `pid` (but thread `but`) were runnable and waited
    for a CPU since each started: /proc's schedstat run_delay."""
    delay = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        if int(task.name) != but:
            with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
                delay += int((task / "schedstat").read_text().split()[1])
    return delay


def test_records_wait_no_longer_than_flush_ms_in_memory(tmp_path: Path) -> None:
    flush_ms = 20
    proc = streamer(tmp_path, 5, "sleep", "--chunk", "1000", "--flush-ms", str(flush_ms))
    try:
        with Steal() as steal:
            (path,) = list(tmp_path.glob("*.ds"))  # made before the streamer logs
            # Failing at 100 times the bound, not at the suite's 20 s.
            wait_for(lambda: ticks(path) == list(range(5)), timeout=100 * flush_ms / 1000,
                     what="the flusher to write the chunk")
        written = written_ns(path)
        # Its main thread sleeps; its other thread is the flusher, started with the stream.
        delayed = waited_for_cpu_ns(proc.pid, but=proc.pid)
    finally:
        proc.kill()
        proc.wait()
    first = min(r.ts for r in StreamReader(path) if r.entity.full_name == "TEST/tick")
    bound = flush_ms * 1_000_000 + OWN_WORK_NS + delayed + steal.stolen_ns
    assert written - first <= bound, (f"the first record waited {(written - first) / 1e6:.1f} ms in memory, "
                                      f"over {bound / 1e6:.1f} ms (its flusher waited {delayed / 1e6:.1f} "
                                      f"ms for a CPU, {steal.stolen_ns / 1e6:.1f} ms stolen)")


def flushes(tmp_path: Path, *streams: str, apart_ms: float = 0) -> subprocess.Popen[str]:
    """tests/programs/flushes.py with `streams` (NAME:FLUSH_MS), once each has its record."""
    proc = subprocess.Popen([sys.executable, str(PROGRAMS / "flushes.py"), str(tmp_path), *streams,
                             "--apart-ms", str(apart_ms)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "logged"
    return proc


def flushed(proc: subprocess.Popen[str], tmp_path: Path, name: str, timeout: float) -> tuple[Path, int, int]:
    """Wait for stream `name`'s record to be written: its file, the kernel's stamp of the
    write, and how long the process's flusher had waited for a CPU by then."""
    (path,) = tmp_path.glob(f"{name}.*.ds")
    wait_for(lambda: ticks(path, f"T/{name}") == [1], timeout=timeout, what=f"stream {name}'s chunk")
    # Its main thread sleeps; its other thread is the flusher, started with its first stream.
    return path, written_ns(path), waited_for_cpu_ns(proc.pid, but=proc.pid)


def logged_ns(path: Path, name: str) -> int:
    return next(r.ts for r in StreamReader(path) if r.entity.full_name == f"T/{name}")


def test_each_stream_waits_its_own_flush_ms_whatever_the_others_ask(tmp_path: Path) -> None:
    fast_ms, slow_ms = 20, 1500
    before = time.time_ns()
    with Steal() as steal:
        proc = flushes(tmp_path, f"fast:{fast_ms}", f"slow:{slow_ms}")
        try:
            fast, fast_written, fast_delayed = flushed(proc, tmp_path, "fast", 100 * fast_ms / 1000)
            assert ticks(next(tmp_path.glob("slow.*.ds")), "T/slow") == []
            slow, slow_written, slow_delayed = flushed(proc, tmp_path, "slow", 3 * slow_ms / 1000)
        finally:
            proc.kill()
            proc.wait()
    # The slow stream's wait starts as it opens: after `before`, and before its header's
    # stamp. The fast one's ticks (every fast_ms) may find it due half of one early, and
    # the kernel's stamp of the write may lag the write by one tick of the coarse clock.
    opened = StreamReader(slow).header.created_ns
    coarse = time.clock_getres(CLOCK_REALTIME_COARSE) * 1e9
    half_tick, slack = fast_ms * HALF_TICK * 1_000_000, OWN_WORK_NS + steal.stolen_ns
    waited, delayed = fast_written - logged_ns(fast, "fast"), fast_delayed
    assert waited <= fast_ms * 1_000_000 + delayed + slack, \
        f"the fast stream's record waited {waited / 1e6:.1f} ms, its flusher {delayed / 1e6:.1f} ms for a CPU"
    assert slow_written - before >= slow_ms * 1_000_000 - half_tick - coarse, \
        f"the slow stream was written {(slow_written - before) / 1e6:.1f} ms after it opened"
    assert slow_written - opened <= slow_ms * 1_000_000 + half_tick + slow_delayed + slack, \
        f"the slow stream was written {(slow_written - opened) / 1e6:.1f} ms after it opened"


def test_a_stream_opened_beside_a_slower_one_waits_only_its_own_flush_ms(tmp_path: Path) -> None:
    fast_ms, slow_ms = 20, 1000
    with Steal() as steal:
        proc = flushes(tmp_path, f"slow:{slow_ms}", f"fast:{fast_ms}", apart_ms=50)
        try:
            fast, written, delayed = flushed(proc, tmp_path, "fast", 3 * slow_ms / 1000)
        finally:
            proc.kill()
            proc.wait()
    waited = written - logged_ns(fast, "fast")
    assert waited <= fast_ms * 1_000_000 + delayed + OWN_WORK_NS + steal.stolen_ns, \
        f"the fast stream's record waited {waited / 1e6:.1f} ms, its flusher {delayed / 1e6:.1f} ms for a CPU"


def test_a_forked_child_writes_its_own_file_and_the_parent_loses_nothing(tmp_path: Path) -> None:
    proc = streamer(tmp_path, 250, "fork", "--chunk", "100")
    assert proc.wait(timeout=10) == 0
    files = {StreamReader(p).header.pid: p for p in tmp_path.glob("*.ds")}
    assert len(files) == 2
    parent = StreamReader(files[proc.pid])
    (child_pid,) = set(files) - {proc.pid}
    child = StreamReader(files[child_pid])
    assert child.header.parent_pid == proc.pid
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
