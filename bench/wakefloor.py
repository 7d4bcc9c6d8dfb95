"""The machine's own floor for a release at an instant: N bare processes, each sleeping in
a thread until the same instants and taking a stamp, as a daemon's release does
(daemon/release.py: real-time priority where it may, timer slack of 1 ns), without a
daemon's work around it.

Per instant, the spread of the N wake-ups (last stamp - first); how late the first and the
median woke. A `release: at` step's skew on this machine cannot be expected below it: N
processes that wake at one instant are run one after another by as many cores as there are.

With `--native`, each of the N is instead a compiled C program (bench/waker.c, built with
the machine's cc) doing the same: the floor whatever language a release is written in.

Prints figures for people, then one JSON object as the last line.

    python bench/wakefloor.py [--processes 100] [--instants 20] [--native]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import tempfile
import threading
import time

from barrier import compiled, measured_apart, percentile
from netspec.daemon.realtime import set_policy
from netspec.daemon.release import PR_SET_TIMERSLACK

GAP_NS = 50_000_000  # between instants: every process is asleep again well before the next


def _waker(instants: list[int], out: int) -> None:
    """One process: a thread at real-time priority (where it may) stamps each instant."""
    lates: list[int] = []

    def run() -> None:
        set_policy(os.SCHED_FIFO, 1)
        ctypes.CDLL(None).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
        for at in instants:
            time.sleep(max(at - time.time_ns(), 0) / 1e9)
            lates.append(time.time_ns() - at)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    os.write(out, (json.dumps(lates) + "\n").encode())


def measure(processes: int, instants: int, native: bool = False) -> list[list[int]]:
    """Each instant's lateness of every process (compiled: `native`), in ns. Forks: call it
    from a process that has no other thread (this file's own main does)."""
    with tempfile.TemporaryDirectory() as built:
        program = compiled("waker.c", built) if native else ""
        first = time.time_ns() + 200_000_000 + processes * 2_000_000
        at = [first + k * GAP_NS for k in range(instants)]
        pipes = []
        for _ in range(processes):
            r, w = os.pipe()
            if os.fork() == 0:
                os.close(r)
                try:
                    if program:
                        os.set_inheritable(w, True)
                        os.execv(program, [program, str(first), str(GAP_NS), str(instants), str(w)])
                    _waker(at, w)
                finally:
                    os._exit(0)
            os.close(w)
            pipes.append(r)
        return _lates(pipes, instants)


def _lates(pipes: list[int], instants: int) -> list[list[int]]:
    """Each instant's lateness of every process, read from each process's pipe."""
    rows = []
    for r in pipes:
        with os.fdopen(r) as f:
            rows.append(json.loads(f.read()))
    for _ in pipes:
        os.wait()
    return [[row[k] for row in rows] for k in range(instants)]


def spreads_us(processes: int, instants: int = 20, native: bool = False) -> list[float]:
    """Each instant's spread, in us, measured in a process of its own (forking from a caller
    with threads would copy them half-done)."""
    return measured_apart(__file__, processes=processes, instants=instants, native=native)["spreads_us"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=100)
    parser.add_argument("--instants", type=int, default=20)
    parser.add_argument("--native", action="store_true", help="compiled processes instead of Python's")
    args = parser.parse_args()
    lates = measure(args.processes, args.instants, args.native)
    spreads = [(max(k) - min(k)) / 1e3 for k in lates]
    firsts = [min(k) / 1e3 for k in lates]
    medians = [sorted(k)[len(k) // 2] / 1e3 for k in lates]
    kind = "compiled " if args.native else ""
    print(f"{args.processes} {kind}processes waking at one instant, {args.instants} instants, "
          f"{os.cpu_count()} CPUs: spread p50 {percentile(spreads, 0.5):.0f} us, "
          f"p99 {percentile(spreads, 0.99):.0f} us; first woke {percentile(firsts, 0.5):.0f} us late, "
          f"the median {percentile(medians, 0.5):.0f} us (p50)")
    print(json.dumps({"processes": args.processes, "native": args.native,
                      "spread_p50_us": round(percentile(spreads, 0.5), 1),
                      "spread_p99_us": round(percentile(spreads, 0.99), 1),
                      "first_late_p50_us": round(percentile(firsts, 0.5), 1),
                      "spreads_us": [round(s, 1) for s in spreads]}))


if __name__ == "__main__":
    main()
