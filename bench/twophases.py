"""bench/nodestart.py's NETSPEC-aware program: it registers two phases, and logs one event
in the second."""

from netspec import nodelib

PING = nodelib.event("BENCH", "ping", "the one event this program logs")
nodelib.register("warm", lambda ctx: None)


@nodelib.phase()
def ping(ctx: nodelib.PhaseContext) -> None:
    PING.log(1)


nodelib.run()
