"""CAMP's cost: one full node sample (system CPU and memory, every interface, every disk,
4 processes) through the procfs backend, through psutil, and by forking `ps`, in the same
run, beside the kernel's part (the same reads, unparsed); then the sampler's CPU use at 10,
100 and 1000 Hz, per thread, beside threads that wake at the same rate and do nothing or
only the bare reads: on a VM where every wakeup is costly, those are the floor. Prints
figures for people, then one JSON object.

    python bench/camp.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from netspec.camp.procfs import READ_SIZE, ProcBackend, process_clock
from netspec.daemon.sampler import CampConfig, CampSampler, open_stream, slot_instants

PROCESSES = 4


def per_call_us(fn, seconds: float = 1.0) -> float:
    """Median of 5 rounds, each as many calls as fit in seconds / 5."""
    rounds = []
    for _ in range(5):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds / 5:
            fn()
            n += 1
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    return sorted(rounds)[2]


def psutil_sample(handles: list[psutil.Process]) -> None:
    psutil.cpu_times()
    psutil.virtual_memory()
    psutil.net_io_counters(pernic=True)
    psutil.disk_io_counters(perdisk=True)
    for h in handles:
        with h.oneshot():
            h.cpu_times()
            h.memory_info()
            h.num_threads()
            h.status()


def ps_sample(pids: list[int]) -> None:
    subprocess.run(["ps", "-o", "pid,min_flt,maj_flt,time,rss,vsz,nlwp,stat", "-p",
                    ",".join(map(str, pids))], capture_output=True, check=True)


def kernel_reads(backend: ProcBackend):
    """The same files and syscalls a sample makes, read and not parsed: the kernel's part,
    the floor under any sampler written in any language."""
    files, processes = list(backend.files.values()), list(backend.processes.items())

    def read() -> None:
        for fd in files:
            os.pread(fd, READ_SIZE, 0)
        backend.free_physical_memory()
        for proc, fd in processes:
            time.clock_gettime_ns(process_clock(proc.pid))
            os.pread(fd, 1024, 0)
    return read


def thread_cpu_percent(fn, hz: float, seconds: float) -> float:
    """CPU % of a thread that calls fn at the sampler's random instants, waiting as it does."""
    used = []

    def run() -> None:
        rng, t0, c0 = random.Random(), time.monotonic_ns(), time.thread_time_ns()
        for instant in slot_instants(t0, int(1e9 / hz), rng):
            if instant > t0 + seconds * 1e9:
                break
            select.select((), (), (), max(0.0, (instant - time.monotonic_ns()) / 1e9))
            fn()
        used.append(100.0 * (time.thread_time_ns() - c0) / (time.monotonic_ns() - t0))
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return used[0]


def sampler_cpu(directory: Path, pids: dict[str, int], hz: float, seconds: float) -> dict[str, float]:
    """The sampler thread's CPU %, the stream flusher's, and the whole process's."""
    streams = open_stream(directory / f"{hz:g}hz", "bench", "h")
    sampler = CampSampler(streams, CampConfig(interval_ms=1000 / hz), pids)
    sampler.start()
    flusher = next(t for t in threading.enumerate() if t.name == "netspec-flusher")
    clocks = {"sampler": time.pthread_getcpuclockid(sampler.thread.ident),
              "flusher": time.pthread_getcpuclockid(flusher.ident)}
    before = {k: time.clock_gettime_ns(c) for k, c in clocks.items()}
    usage0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic_ns()
    time.sleep(seconds)
    after = {k: time.clock_gettime_ns(c) for k, c in clocks.items()}
    usage1, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic_ns() - t0
    sampler.stop()
    streams.stop()
    cpu = {k: 100.0 * (after[k] - before[k]) / wall for k in clocks}
    cpu["process"] = 100.0 * 1e9 * ((usage1.ru_utime + usage1.ru_stime)
                                    - (usage0.ru_utime + usage0.ru_stime)) / wall
    cpu["samples"] = sampler.samples
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per sampler rate")
    args = parser.parse_args()
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
                for _ in range(PROCESSES)]
    pids = {f"p{i}": p.pid for i, p in enumerate(sleepers)}
    try:
        with tempfile.TemporaryDirectory(prefix="camp-bench-") as tmp:
            directory = Path(tmp)
            streams = open_stream(directory / "one", "bench", "h")
            sampler = CampSampler(streams, CampConfig(), pids)
            ours = per_call_us(sampler.sample)
            bare = kernel_reads(sampler.backend)
            floor = per_call_us(bare)
            streams.stop()
            handles = [psutil.Process(p) for p in pids.values()]
            theirs = per_call_us(lambda: psutil_sample(handles))
            forked = per_call_us(lambda: ps_sample(list(pids.values())), seconds=2.0)
            what = (f"system + {len(sampler.interfaces)} interfaces + {len(sampler.disks)} disks "
                    f"+ {PROCESSES} processes")
            print(f"one full sample ({what}), median of 5 rounds:")
            print(f"  CAMP procfs (with its stream record)   {ours:8.1f} us")
            print(f"  the kernel's part: the same reads bare {floor:8.1f} us   "
                  f"(CAMP's own work {ours - floor:.1f} us)")
            print(f"  psutil, the same values                {theirs:8.1f} us   ({theirs / ours:.1f}x ours)")
            print(f"  fork of ps                             {forked:8.1f} us   ({forked / ours:.0f}x ours)")
            print(f"sampler CPU, % of one CPU over {args.seconds:g} s at random instants; beside it, threads "
                  "waking at the same rate that do nothing, or only the bare reads:")
            rates = {}
            for hz in (10, 100, 1000):
                cpu = sampler_cpu(directory, pids, hz, args.seconds)
                cpu["idle_thread"] = thread_cpu_percent(lambda: None, hz, args.seconds)
                cpu["bare_reads_thread"] = thread_cpu_percent(bare, hz, args.seconds)
                rates[str(hz)] = {k: round(v, 3) for k, v in cpu.items()}
                print(f"  {hz:>4} Hz: sampler thread {cpu['sampler']:6.2f}  flusher {cpu['flusher']:5.2f}  "
                      f"whole process {cpu['process']:6.2f}  |  idle thread {cpu['idle_thread']:5.2f}  "
                      f"bare reads {cpu['bare_reads_thread']:6.2f}  ({cpu['samples']} samples)")
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    print(json.dumps({"bench": "camp", "sample": what, "camp_us": round(ours, 2),
                      "kernel_reads_us": round(floor, 2), "psutil_us": round(theirs, 2),
                      "ps_fork_us": round(forked, 1), "psutil_over_camp": round(theirs / ours, 2),
                      "sampler": rates}))


if __name__ == "__main__":
    main()
