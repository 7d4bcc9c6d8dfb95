"""A NETSPEC-aware test program that misbehaves on request, as babeltrace2's tests use
deliberately failing components. Its params say what to do in which phase:

    fail_in: PHASE     raise an exception in PHASE (after printing `lines` lines)
    warn_in: PHASE     ack PHASE with a warning
    hang_in: PHASE     never return from PHASE
    exit_in: PHASE     exit the process with `exit_code` in PHASE
    orphan: true       at launch, leave a grandchild in its own session (escapes the group)
    ticks: N           log N PLAY/tick events in each phase it takes part in
    span_ms_PHASE: MS  in PHASE, log `spans` (10) PLAY/span intervals of about MS ms each
    slow_in: PHASE     take `slow_ms` (300) ms longer in PHASE

Every phase is also logged as a PLAY/phase event whose data is the phase's name.
"""

import os
import subprocess
import sys
import time

from netspec import nodelib

PHASE = nodelib.event("PLAY", "phase", "the actor entered a phase", decoder="utf8")
TICK = nodelib.event("PLAY", "tick")
SPAN = nodelib.interval("PLAY", "span")


def act(ctx: nodelib.PhaseContext) -> str:
    p = ctx.params
    PHASE.log(0, ctx.phase.encode())
    for i in range(int(p.get("ticks", 0))):
        TICK.log(i)
    if f"span_ms_{ctx.phase}" in p:
        for i in range(int(p.get("spans", 10))):
            started = SPAN.start()
            time.sleep(float(p[f"span_ms_{ctx.phase}"]) / 1e3)
            SPAN.end(i, started)
    if p.get("slow_in") == ctx.phase:
        time.sleep(float(p.get("slow_ms", 300)) / 1e3)
    with open(f"{ctx.component}.log", "a") as log:
        log.write(f"{ctx.phase} on {ctx.host} {sorted(p.items())}\n")
    if ctx.phase == "launch" and p.get("orphan"):
        subprocess.Popen(["sleep", "300"], start_new_session=True)
    if p.get("publish_in") == ctx.phase:
        ctx.publish(value=p.get("value"))
    if p.get("echo_in") == ctx.phase:
        return f"saw {ctx.lookup(p['from'], 'value')}"
    for i in range(int(p.get("lines", 0))):
        print(f"{ctx.component} line {i}")
    print(f"{ctx.component} stderr in {ctx.phase}", file=sys.stderr)
    if p.get("fail_in") == ctx.phase:
        raise RuntimeError(f"{ctx.component} fails in {ctx.phase} as asked")
    if p.get("warn_in") == ctx.phase:
        ctx.warn("something looks odd")
    if p.get("exit_in") == ctx.phase:
        sys.stdout.flush()
        os._exit(int(p.get("exit_code", 3)))
    if p.get("hang_in") == ctx.phase:
        while True:
            time.sleep(60)
    ctx.hand_back(f"{ctx.component}.log")
    return ""


for phase in sys.argv[1].split(","):
    nodelib.register(phase, act)
nodelib.run()
