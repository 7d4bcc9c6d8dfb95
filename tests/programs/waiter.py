"""A NETSPEC-aware test program that holds each phase it registers (argv[1], comma-separated)
until the test lets it go: until the file `<params.dir>/<phase>.go` exists, or with
`params.count`, until that many files `<params.dir>/<phase>.*.go` do (other components' own
signals); two minutes at most. A test measures something while a run is in a phase it knows."""

import sys
import time
from pathlib import Path

from netspec import nodelib

HOLD_S = 120.0


def hold(ctx: nodelib.PhaseContext) -> str:
    where = Path(ctx.params["dir"])
    (where / f"{ctx.phase}.in").touch()
    count = int(ctx.params.get("count", 0))
    pattern = f"{ctx.phase}.*.go" if count else f"{ctx.phase}.go"
    give_up = time.monotonic() + HOLD_S
    while len(list(where.glob(pattern))) < max(count, 1):
        if time.monotonic() > give_up:
            raise RuntimeError(f"{max(count, 1)} of {where / pattern} never appeared")
        time.sleep(0.02)
    return ""


for phase in sys.argv[1].split(","):
    nodelib.register(phase, hold)
nodelib.run()
