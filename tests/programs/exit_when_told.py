"""A NETSPEC-aware test program that ends itself, `os._exit(exit_code)`, at the end of its
callback of phase `exit_in`, but only once its daemon has sent it something more (the next
step's enter, or the STOP of collect), which it leaves unread: the race of a component whose
end is reported after the next step was entered, made to happen every time. It registers
the phases of argv[1] (comma-separated); two minutes at most.
"""

import os
import select
import sys

from netspec import nodelib

HOLD_S = 120.0


def act(ctx: nodelib.PhaseContext) -> str:
    if ctx.params.get("exit_in") == ctx.phase:
        # Readable: the daemon wrote to this end of the channel while the callback runs.
        readable, _, _ = select.select([int(os.environ["NETSPEC_FD"])], [], [], HOLD_S)
        if not readable:
            raise RuntimeError(f"nothing more came from netspecd within {HOLD_S:g} s")
        os._exit(int(ctx.params.get("exit_code", 1)))
    return ""


for phase in sys.argv[1].split(","):
    nodelib.register(phase, act)
nodelib.run()
