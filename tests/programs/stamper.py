"""A NETSPEC-aware test program: in phase `work` it logs `count` NOW/stamp events whose data
is time.time_ns() (integers above 2**53, which a double rounds), writes the values it logged
to stamps.txt (handed back), then forks a child that logs one more and dies of SIGKILL, so
the child's stream file has no clean close record."""

import os
import signal
import time

from netspec import nodelib
from netspec.nodelib import instrument

STAMP = nodelib.event("NOW", "stamp", "time.time_ns() when logged")


def work(ctx: nodelib.PhaseContext) -> str:
    values = []
    for i in range(int(ctx.params.get("count", 100))):
        values.append(time.time_ns())
        STAMP.log(i, values[-1])
    child = os.fork()
    if child == 0:
        STAMP.log(-1, time.time_ns())
        for stream in instrument.default.streams:  # written to its own file, but never closed
            stream.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(child, 0)
    with open("stamps.txt", "w") as f:
        f.write("\n".join(map(str, values)) + "\n")
    ctx.hand_back("stamps.txt")
    return ""


nodelib.register("work", work)
nodelib.run()
