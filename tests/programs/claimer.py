"""A NETSPEC-aware test program that claims roles on a schedule: in phase `work`, a thread of
its own claims (or lets go) each of `params.claims` ([after_s, role, held]) so long after the
phase began, printing `<time_ns> <role> <held>` just before each, and holds the phase for
`params.hold_s`; then it runs until stopped.
A test aims faults at the roles and checks each took the holder of its instant."""

import threading
import time

from netspec import nodelib


def claims(ctx: nodelib.PhaseContext) -> None:
    began = time.monotonic()
    for after_s, role, held in ctx.params.get("claims", []):
        time.sleep(max(0.0, began + after_s - time.monotonic()))
        print(time.time_ns(), role, held, flush=True)
        nodelib.claim(role, held=held)


@nodelib.phase()
def work(ctx: nodelib.PhaseContext) -> None:
    threading.Thread(target=claims, args=(ctx,), daemon=True).start()
    time.sleep(float(ctx.params.get("hold_s", 0)))


nodelib.run()
