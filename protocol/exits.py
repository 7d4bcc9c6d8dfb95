"""A run's processes and how they ended, as the daemon and the controller (for local
hosts) both see them: every process of a run carries the run's id in its environment
(NETSPEC_RUN), so even a component's orphaned grandchildren are found and ended."""

from __future__ import annotations

import contextlib
import os
import signal

import psutil

from . import messages as m


def ended_well(code: int | None) -> bool:
    """Still running, exited 0, or ended by the SIGTERM netspec sent it."""
    return code in (None, 0, -signal.SIGTERM)


def describe_returncode(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited {code}"


def run_processes(run_id: str, also: list[int] = (), host: str = "") -> list[psutil.Process]:
    """Every live process of this run: the given pids plus all carrying the run's id (and,
    given `host`, that host's name: hosts of one run may share a machine). It scans every
    process's environment, some ms each: call it from a thread where a loop must go on."""
    found: dict[int, psutil.Process] = {}
    for pid in also:
        with contextlib.suppress(psutil.Error):
            found[pid] = psutil.Process(pid)
    me = os.getpid()
    for proc in psutil.process_iter():
        if proc.pid == me or proc.pid in found:
            continue
        with contextlib.suppress(psutil.Error):
            env = proc.environ()
            if env.get(m.RUN_ENV) == run_id and (not host or env.get(m.HOST_ENV) == host):
                found[proc.pid] = proc
    return [p for p in found.values() if _alive(p)]


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
