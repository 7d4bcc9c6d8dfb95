"""A NETSPEC-aware test program that burns a fixed amount of CPU in phase `work` on one CPU,
and prints what the kernel says that took: `truth WAITED_NS RAN_NS WALL_NS`, its main
thread's run-queue wait (/proc/self/schedstat) and CPU time over the callback. Its params:

    cpu: N         the CPU it is pinned to as `work` starts (a test pins a hog there too)
    burn_ms: MS    CPU time to burn in `work` (default 200)
"""

import os
import time
from pathlib import Path

from netspec import nodelib


def schedstat() -> tuple[int, int]:
    ran, waited, _ = Path("/proc/self/schedstat").read_text().split()
    return int(waited), int(ran)


def work(ctx: nodelib.PhaseContext) -> str:
    burn_ns = int(float(ctx.params.get("burn_ms", 200)) * 1e6)
    os.sched_setaffinity(0, {int(ctx.params.get("cpu", 0))})
    waited0, ran0 = schedstat()
    wall0, cpu0 = time.monotonic_ns(), time.thread_time_ns()
    while time.thread_time_ns() - cpu0 < burn_ns:
        sum(range(1000))
    waited1, ran1 = schedstat()
    print(f"truth {waited1 - waited0} {ran1 - ran0} {time.monotonic_ns() - wall0}", flush=True)
    return ""


nodelib.register("work", work)
nodelib.run()
