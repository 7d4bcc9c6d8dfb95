"""Competing CPU load, NETSPEC-aware: `cpus` processes, each busy `percent` % of every
`period_ms`, from the phase named `start_in` (default run; it returns at once) until the
phase named `stop_in` (default collect), which acks with the CPU share each process got.
Each busy slice is logged as a CPULOAD/busy interval, by each worker (a forked process
writes a stream of its own).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

from netspec import nodelib

BUSY = nodelib.interval("CPULOAD", "busy", "one busy slice of a worker")


def _worker(percent: float, period_ms: float) -> None:
    period = int(period_ms * 1e6)
    busy = int(period * percent / 100)
    next_at = time.monotonic_ns()
    slice_no = 0
    while True:
        start = BUSY.start()
        end = time.monotonic_ns() + busy
        while time.monotonic_ns() < end:
            pass
        BUSY.end(slice_no, start)
        slice_no += 1
        next_at += period
        pause = next_at - time.monotonic_ns()
        if pause > 0:
            time.sleep(pause / 1e9)


class CpuLoad:
    def __init__(self, params: dict) -> None:
        self.percent = float(params.get("percent", 50))
        self.cpus = int(params.get("cpus", 1))
        self.period_ms = float(params.get("period_ms", 10))
        self.workers: list[multiprocessing.Process] = []
        self.started = 0.0

    def start(self, ctx: nodelib.PhaseContext) -> str:
        context = multiprocessing.get_context("fork")  # workers inherit the open streams
        self.workers = [context.Process(target=_worker, args=(self.percent, self.period_ms), daemon=True)
                        for _ in range(self.cpus)]
        self.started = time.monotonic()
        for w in self.workers:
            w.start()
        return f"{self.cpus} worker(s) at {self.percent:g} % of {self.period_ms:g} ms"

    def stop(self, ctx: nodelib.PhaseContext) -> str:
        shares = []
        elapsed = time.monotonic() - self.started
        for w in self.workers:
            with open(f"/proc/{w.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks = int(fields[11]) + int(fields[12])  # utime + stime
            shares.append(100 * ticks / os.sysconf("SC_CLK_TCK") / elapsed)
            os.kill(w.pid, signal.SIGTERM)  # the worker's streams flush on SIGTERM
        for w in self.workers:
            w.join(timeout=5)
        got = ", ".join(f"{s:.1f} %" for s in shares)
        return f"asked {self.percent:g} % on {self.cpus} worker(s), got {got}"


def main() -> None:
    params = nodelib.component_params()
    load = CpuLoad(params)
    nodelib.register(params.get("start_in", "run"), load.start)
    nodelib.register(params.get("stop_in", "collect"), load.stop)
    nodelib.run()


if __name__ == "__main__":
    main()
