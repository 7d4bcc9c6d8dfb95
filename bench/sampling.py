"""CAMP's randomized instants against a periodic sampler in step with periodic loads: what
each sees of two processes' running share, beside the scheduler's truth of the same window.

The isochronous process is busy 6.75 ms of every 22.5 ms (30 %); the adversary 11 ms of every
22.5 ms, from 8 ms in (49 %): neither runs 21 ms into any period, where the periodic sampler
looks (100 samples, one a period). The randomized sampler (1 ms slots) reads each process's
run state at a random instant of each slot for `--seconds`. The truth is schedstat's: a
process is runnable ('R') while on a CPU (low) and while waiting for one (high), and while
the hypervisor takes its CPU (steal, added to high). On a machine busy with other work the
loads are held off their schedule and the periodic sampler sees them running where they
should not be: the figures say how far ("in_step_off_schedule"). Take it with the machine to
itself. (tests/daemon/test_sampler.py holds the randomized estimate to the truth, loaded or
not.) Prints figures for people, then one JSON object.

    python bench/sampling.py [--seconds 4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from netspec import camp
from netspec.daemon.sampler import CampConfig, CampSampler, open_stream
from netspec.datastream.reader import StreamReader

LOADGEN = Path(__file__).resolve().parents[1] / "tests" / "programs" / "loadgen.py"
PERIOD_NS = 22_500_000
LOADS = {"iso": ("6.75", "0"), "adversary": ("11", "8")}  # busy ms, from ms into each period
IN_STEP_NS = 21_000_000  # into each period: where neither load runs


def schedstat(pid: int) -> tuple[int, int]:
    """The process's time on a CPU and its time waiting for one, over its threads (ns)."""
    ran = waited = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        r, w, _ = map(int, (task / "schedstat").read_text().split())
        ran, waited = ran + r, waited + w
    return ran, waited


def running_share(directory: Path, name: str) -> tuple[float, int]:
    values = [r.value[f"proc.{name}.running"] for p in directory.glob("*.ds") for r in StreamReader(p)
              if r.entity.full_name == "CAMP/node"]
    return 100.0 * sum(values) / len(values), len(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="the randomized sampler's window")
    args = parser.parse_args()
    epoch = time.monotonic_ns()
    loads = {name: subprocess.Popen([sys.executable, str(LOADGEN), "periodic", f"{PERIOD_NS / 1e6:g}",
                                     busy, offset, str(epoch)],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for name, (busy, offset) in LOADS.items()}
    pids = {name: proc.pid for name, proc in loads.items()}
    try:
        for proc in loads.values():
            assert proc.stdout.readline().strip() == "ready"
        with tempfile.TemporaryDirectory(prefix="sampling-bench-") as tmp:
            randomized, in_step = Path(tmp) / "randomized", Path(tmp) / "in-step"
            before, steal0 = {n: schedstat(p) for n, p in pids.items()}, camp.cpu_times().steal
            t0 = time.monotonic_ns()
            streams = open_stream(randomized, "bench", "h")
            sampler = CampSampler(streams, CampConfig(interval_ms=1, interfaces=("lo",), disks=()), pids)
            sampler.start()
            time.sleep(args.seconds)
            sampler.stop()
            streams.stop()
            elapsed = time.monotonic_ns() - t0
            after = {n: schedstat(p) for n, p in pids.items()}
            steal = (camp.cpu_times().steal - steal0) / elapsed
            periodic = open_stream(in_step, "bench", "h")
            stepped = CampSampler(periodic, CampConfig(interfaces=("lo",), disks=()), pids)
            for _ in range(100):
                k = (time.monotonic_ns() - epoch) // PERIOD_NS + 1
                time.sleep(max(0, epoch + k * PERIOD_NS + IN_STEP_NS - time.monotonic_ns()) / 1e9)
                stepped.sample()
            periodic.stop()
            figures = {}
            for name in pids:
                ran, waited = (a - b for a, b in zip(after[name], before[name], strict=True))
                share, n = running_share(randomized, name)
                fixed, m = running_share(in_step, name)
                figures[name] = {"truth_low_pct": round(100 * ran / elapsed, 1),
                                 "truth_high_pct": round(100 * (ran + waited) / elapsed + 100 * steal, 1),
                                 "randomized_pct": round(share, 1), "randomized_samples": n,
                                 "in_step_pct": round(fixed, 1), "in_step_samples": m,
                                 "in_step_off_schedule": fixed > 3}
    finally:
        for proc in loads.values():
            proc.kill()
            proc.wait()
    for name, f in figures.items():
        print(f"{name}: truth {f['truth_low_pct']}-{f['truth_high_pct']} % (schedstat, steal); randomized "
              f"{f['randomized_pct']} % ({f['randomized_samples']} samples); periodic in step "
              f"{f['in_step_pct']} % ({f['in_step_samples']} samples)"
              + ("; the machine held it off its schedule" if f["in_step_off_schedule"] else ""))
    print(json.dumps({"bench": "sampling", "seconds": args.seconds, "loads": figures}))


if __name__ == "__main__":
    main()
