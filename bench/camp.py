"""CAMP's cost: one full node sample (system CPU and memory, every interface, every disk,
4 processes) through the procfs backend, through psutil, and by forking `ps`, in the same
run; then the sampler's own CPU use at 10, 100 and 1000 Hz. Prints figures for people,
then one JSON object.

    python bench/camp.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from netspec.daemon.sampler import CampConfig, CampSampler
from netspec.nodelib.instrument import Datastreams
from netspec.nodelib.streams import StreamConfig, StreamInfo

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


def open_stream(directory: Path, name: str) -> Datastreams:
    streams = Datastreams()
    streams.start([StreamConfig("camp", enable=("CAMP",))],
                  StreamInfo(directory / name, run="bench", host="h", component="camp"),
                  exit_hooks=False)
    return streams


def sampler_cpu(directory: Path, pids: dict[str, int], hz: float, seconds: float) -> tuple[float, int]:
    streams = open_stream(directory, f"{hz:g}hz")
    sampler = CampSampler(streams, CampConfig(interval_ms=1000 / hz), pids)
    before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    after, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - t0
    streams.stop()
    used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return 100.0 * used / wall, sampler.samples


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
            streams = open_stream(directory, "one")
            sampler = CampSampler(streams, CampConfig(), pids)
            ours = per_call_us(sampler.sample)
            streams.stop()
            handles = [psutil.Process(p) for p in pids.values()]
            theirs = per_call_us(lambda: psutil_sample(handles))
            forked = per_call_us(lambda: ps_sample(list(pids.values())), seconds=2.0)
            what = (f"system + {len(sampler.interfaces)} interfaces + {len(sampler.disks)} disks "
                    f"+ {PROCESSES} processes")
            print(f"one full sample ({what}), median of 5 rounds:")
            print(f"  CAMP procfs (with its stream records)  {ours:8.1f} us")
            print(f"  psutil, the same values                {theirs:8.1f} us   ({theirs / ours:.1f}x ours)")
            print(f"  fork of ps                             {forked:8.1f} us   ({forked / ours:.0f}x ours)")
            rates = {}
            for hz in (10, 100, 1000):
                cpu, samples = sampler_cpu(directory, pids, hz, args.seconds)
                rates[str(hz)] = {"cpu_percent": round(cpu, 3), "samples": samples}
                print(f"  sampler at {hz:>4} Hz: {cpu:6.2f} % of one CPU "
                      f"({samples} samples in {args.seconds:g} s)")
    finally:
        for p in sleepers:
            p.kill()
            p.wait()
    print(json.dumps({"bench": "camp", "sample": what, "camp_us": round(ours, 2),
                      "psutil_us": round(theirs, 2),
                      "ps_fork_us": round(forked, 1), "psutil_over_camp": round(theirs / ours, 2),
                      "sampler": rates}))


if __name__ == "__main__":
    main()
