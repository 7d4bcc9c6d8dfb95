"""Known loads for CAMP's validation, each announced on stdout once in place:
  periodic PERIOD_MS BUSY_MS OFFSET_MS EPOCH_NS  busy BUSY_MS of every PERIOD_MS, from
      OFFSET_MS into each period counted from EPOCH_NS (CLOCK_MONOTONIC), asleep otherwise
  percent PERCENT                                the CAMP paper's waste(): busy PERCENT % of
      every 10 ms
  memory MB          on a line from stdin, allocate MB MiB and touch every page
  thread             on a line from stdin, start one more (sleeping) thread
  tickhog            busy between the kernel's ticks, asleep across each one
"""

import collections
import sys
import threading
import time

TICK_NS = 4_000_000  # CONFIG_HZ=250; the test checks the kernel's
REPHASE_NS = 400_000_000


def periodic(period_ms: float, busy_ms: float, offset_ms: float, epoch: int) -> None:
    period, busy, offset = int(period_ms * 1e6), int(busy_ms * 1e6), int(offset_ms * 1e6)
    print("ready", flush=True)
    start = epoch + offset
    while True:
        now = time.monotonic_ns()
        k = (now - start) // period
        begin = start + k * period
        if now >= begin + busy:
            begin += period
            time.sleep((begin - now) / 1e9)
        while time.monotonic_ns() < begin + busy:
            pass


def percent(share: float) -> None:
    """Run `share` % of every 10 ms, counted in CPU time: a busy loop timed by the wall clock
    gets less than asked on a machine whose other tenants take the CPU from it."""
    period = 10_000_000
    busy = int(period * share / 100)
    print("ready", flush=True)
    next_at = time.monotonic_ns()
    while True:
        until = time.thread_time_ns() + busy
        while time.thread_time_ns() < until:
            pass
        next_at += period
        time.sleep(max(0, next_at - time.monotonic_ns()) / 1e9)


def tick_phase(seconds: float = 0.3) -> int:
    """A tick interrupt shows as a gap in a tight clock loop; the gaps' times modulo the
    tick agree on its phase."""
    gaps = collections.Counter()
    last = time.monotonic_ns()
    end = last + int(seconds * 1e9)
    while last < end:
        now = time.monotonic_ns()
        if now - last > 1500:
            gaps[(last % TICK_NS) // 100_000] += 1
        last = now
    return gaps.most_common(1)[0][0] * 100_000


def tickhog() -> None:
    phase = tick_phase()
    print("ready", flush=True)
    while True:
        # A virtual machine's ticks drift against its clock: find their phase again often.
        until = time.monotonic_ns() + REPHASE_NS
        while (now := time.monotonic_ns()) < until:
            tick = now - (now - phase) % TICK_NS + TICK_NS
            while time.monotonic_ns() < tick - 400_000:
                pass
            time.sleep(max(0, tick + 300_000 - time.monotonic_ns()) / 1e9)
        phase = tick_phase(0.06)


def main() -> None:
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "periodic":
        periodic(*map(float, args[:3]), int(args[3]))
    elif mode == "percent":
        percent(float(args[0]))
    elif mode == "tickhog":
        tickhog()
    elif mode == "memory":
        print("ready", flush=True)
        sys.stdin.readline()
        block = bytearray(int(args[0]) << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        print("done", flush=True)
        sys.stdin.readline()
    elif mode == "thread":
        print("ready", flush=True)
        sys.stdin.readline()
        threading.Thread(target=sys.stdin.readline, daemon=True).start()
        print("done", flush=True)
        time.sleep(3600)


if __name__ == "__main__":
    main()
