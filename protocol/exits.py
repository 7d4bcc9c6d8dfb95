"""A run's processes and how they ended, as the daemon and the controller (for local
hosts) both see them: every process of a run carries the run's id in its environment
(NETSPEC_RUN), so even a component's orphaned grandchildren are found and ended."""

from __future__ import annotations

import contextlib
import os
import signal

import psutil

from . import messages as m
from .outcome import Outcome

# How a component's end came about, which its verdict depends on (`exit_verdict`).
ASKED = "asked"  # netspec asked it to end (STOP, SIGTERM, a reset, a kill at the end)
AWAITED = "awaited"  # a command its start phase runs to its end: that phase's ack says how it went
UNASKED = "unasked"  # neither: it ended on its own (or someone else ended it) mid-run
SCHEDULED = "scheduled"  # the experiment's fault schedule killed or terminated it (daemon/faults.py)

# A component's end, as the one rule below reads it.
RUNNING = "running"  # no end yet
CLEAN = "clean"  # exited 0, or ended by the SIGTERM netspec sent it
UNCLEAN = "unclean"  # asked to end or awaited, it ended otherwise (its ack or the unclean ends say so)
FAILED = "failed"  # any end but 0 that nobody asked for nor awaited: a death mid-run (its Exit event)
KILLED = Outcome.SCHEDULED.value  # ended by a fault of the schedule: its expected effect, not a failure


def exit_verdict(code: int | None, ending: str) -> str:
    """How a component's end reads: the one rule that the daemon's Exit event (`failed`)
    and acks, and the controller's `ComponentResult.ok` (a run's unclean ends) all apply.

    Args:
        code: its return code (negative: the signal that ended it); None while it runs.
        ending: how its end came about: ASKED, AWAITED, UNASKED or SCHEDULED. A SIGTERM is
            clean only when netspec sent it (ASKED): one from elsewhere mid-run is a failure.
            Any end but 0 after a fault of the schedule killed or terminated it is that
            fault's effect (KILLED), not the run's failure.

    Returns:
        RUNNING, CLEAN, UNCLEAN, FAILED or KILLED.
    """
    if code is None:
        return RUNNING
    if code == 0 or (ending == ASKED and code == -signal.SIGTERM):
        return CLEAN
    if ending == SCHEDULED:
        return KILLED
    return FAILED if ending == UNASKED else UNCLEAN


def ended_well(code: int | None, ending: str) -> bool:
    """Still running, ended cleanly, or ended by the schedule's fault (`exit_verdict`)."""
    return exit_verdict(code, ending) in (RUNNING, CLEAN, KILLED)


def ending_told(expected: bool, failed: bool, scheduled: bool = False) -> str:
    """A component's `ending` read back from its Exit event, which carries `scheduled`
    (SCHEDULED), `expected` (ASKED) and `failed` (the daemon's verdict, FAILED): none is
    UNASKED with exit 0 or AWAITED, which read alike but for a non-zero end, where only
    AWAITED can be."""
    if scheduled:
        return SCHEDULED
    if expected:
        return ASKED
    return UNASKED if failed else AWAITED


def describe_returncode(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited {code}"


def children(pid: int) -> list[int]:
    """Process `pid`'s children (zombies too), from /proc/PID/task/TID/children."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Every descendant of process `pid`: the cost is the descendants', not the machine's
    (psutil's `children` reads every process on it)."""
    found, todo = [], [pid]
    while todo:
        below = children(todo.pop())
        found += below
        todo += below
    return found


def run_processes(run_id: str, also: list[int] = (), host: str = "",
                  among: list[int] | None = None) -> list[psutil.Process]:
    """Every live process of this run: the given pids plus all carrying the run's id (and,
    given `host`, that host's name: hosts of one run may share a machine), looked for
    `among` those pids or else on the whole machine. It reads each candidate's environment:
    call it from a thread where a loop must go on."""
    found: dict[int, psutil.Process] = {}
    for pid in also:
        with contextlib.suppress(psutil.Error):
            found[pid] = psutil.Process(pid)
    me = os.getpid()
    # Raw bytes searched, not psutil's parsed dict: a thousand local daemons each scan
    # the machine at reset, so the scan's cost is paid a million times.
    needles = [f"\0{m.RUN_ENV}={run_id}\0".encode(), *([f"\0{m.HOST_ENV}={host}\0".encode()] if host else [])]
    if among is None:
        among = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    candidates = among
    for pid in candidates:
        if pid == me or pid in found:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = b"\0" + f.read()
        except OSError:
            continue
        if all(n in env for n in needles):
            with contextlib.suppress(psutil.Error):
                found[pid] = psutil.Process(pid)
    return [p for p in found.values() if _alive(p)]


def still_alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of `procs` that have not ended (a zombie has)."""
    return [p for p in procs if _alive(p)]


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def signal_pids(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_run_processes(run_id: str, also: list[int], sig: signal.Signals, host: str = "") -> None:
    """Signal every live process of the run (on `host`, if given; see `run_processes`)."""
    signal_pids([p.pid for p in run_processes(run_id, also, host)], sig)


def end_run_processes(run_id: str, grace_s: float, host: str = "") -> int:
    """End what a lost daemon left of a run: SIGTERM, so that each component's streams are
    flushed as it exits, then SIGKILL for whatever is alive after `grace_s`. Blocking;
    returns the number of processes found."""
    victims = run_processes(run_id, [], host)
    signal_pids([p.pid for p in victims], signal.SIGTERM)
    _, alive = psutil.wait_procs(victims, timeout=grace_s)
    signal_pids([p.pid for p in alive], signal.SIGKILL)
    return len(victims)
