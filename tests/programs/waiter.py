"""A NETSPEC-aware test program that holds each phase it registers (argv[1], comma-separated)
until the test lets it go: until the file `<params.dir>/<phase>.go` exists (two minutes at
most), so that a test measures something while a run is in a phase it knows."""

import sys
import time
from pathlib import Path

from netspec import nodelib

HOLD_S = 120.0


def hold(ctx: nodelib.PhaseContext) -> str:
    go = Path(ctx.params["dir"]) / f"{ctx.phase}.go"
    (Path(ctx.params["dir"]) / f"{ctx.phase}.in").touch()
    give_up = time.monotonic() + HOLD_S
    while not go.exists():
        if time.monotonic() > give_up:
            raise RuntimeError(f"{go} never appeared")
        time.sleep(0.02)
    return ""


for phase in sys.argv[1].split(","):
    nodelib.register(phase, hold)
nodelib.run()
