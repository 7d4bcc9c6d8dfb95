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
from netspec.protocol.blockingchannel import BlockingChannel

HOLD_S = 120.0
CHANNELS: list[BlockingChannel] = []  # nodelib's one channel to its daemon
_opened = BlockingChannel.__init__


def _kept(self: BlockingChannel, *args: object, **kwargs: object) -> None:
    _opened(self, *args, **kwargs)
    CHANNELS.append(self)


BlockingChannel.__init__ = _kept  # type: ignore[method-assign]


def act(ctx: nodelib.PhaseContext) -> str:
    if ctx.params.get("exit_in") == ctx.phase:
        # Something more came while the callback runs: still in the socket, or already read
        # by nodelib with the phase's enter (a loaded machine's daemon can send both before
        # this program reads either: one recv then holds the two, and select sees nothing).
        more = bool(CHANNELS[0]._ready) or bool(select.select(
            [int(os.environ["NETSPEC_FD"])], [], [], HOLD_S)[0])
        if not more:
            raise RuntimeError(f"nothing more came from netspecd within {HOLD_S:g} s")
        os._exit(int(ctx.params.get("exit_code", 1)))
    return ""


for phase in sys.argv[1].split(","):
    nodelib.register(phase, act)
nodelib.run()
