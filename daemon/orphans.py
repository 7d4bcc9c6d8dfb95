"""A run's processes on this host, found without scanning the machine.

The daemon is a child subreaper (PR_SET_CHILD_SUBREAPER): an orphan of any of its
descendants, double-forked or in a session of its own, is re-parented to it rather than to
init, so every process a run started stays below the daemon and is found among its
descendants. A thousand local daemons each scanning every process on the machine at reset
made teardown quadratic; this is linear. Orphans the daemon adopted are reaped here when
they end; the components it started are asyncio's to reap (SPAWNED), never ours.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

import psutil
from netspec.protocol.exits import children, descendants, run_processes

PR_SET_CHILD_SUBREAPER = 36
# The components asyncio started and has not yet seen end.
SPAWNED: set[int] = set()
_adopting = False


def adopt_orphans() -> bool:
    """Make this process the reaper of its descendants' orphans; False where the kernel
    refuses (a reset then scans every process on the machine)."""
    global _adopting
    _adopting = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    return _adopting


def run_processes_below(run_id: str, also: list[int], host: str) -> list[psutil.Process]:
    """The run's live processes on this host: among this daemon's descendants where it
    adopts orphans, else on the whole machine. Blocking."""
    return run_processes(run_id, also, host, descendants(os.getpid()) if _adopting else None)


def reap_adopted() -> None:
    """Reap the adopted orphans that have ended (they are this daemon's zombies now)."""
    if not _adopting:
        return
    for pid in children(os.getpid()):
        if pid not in SPAWNED:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
