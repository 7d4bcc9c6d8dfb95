"""A fault's pressure processes on a real netspecd: they end with the daemon that started
them, however it ends."""

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from daemonview import Session
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from support import session_run_id, wait_for


def pressures_of(run: str) -> list[int]:
    """The live processes that carry `run`'s id (the pressures: the run has no component)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if f"{m.RUN_ENV}={run}".encode() in environ and state != "Z":
            found.append(int(entry))
    return found


@pytest.mark.parametrize("kind", ["cpu", "memory", "disk"])
def test_a_pressures_processes_end_when_their_daemon_is_killed(daemon, key, kind):
    run = session_run_id(f"r-pressure-{kind}")

    async def start() -> None:
        async with Session(daemon.port, key) as s:
            await s.request(m.SETUP, run=run, host="a", components=[])
            await s.request(k.FAULT, index=0, fault=kind, at_ns=time.time_ns(), for_s=300, workers=2,
                            **({} if kind == "cpu" else {"size": 1 << 20}))
            wait_for(lambda: pressures_of(run), what=f"the {kind} pressure's processes to start")
            # Killed with the connection still open: no reset, no clean-up of its own.
            daemon.proc.send_signal(signal.SIGKILL)
            daemon.proc.wait(timeout=10)

    try:
        asyncio.run(start())
        wait_for(lambda: not pressures_of(run), timeout=20,
                 what=f"the {kind} pressure's processes to end with their daemon")
    finally:
        for pid in pressures_of(run):
            os.kill(pid, signal.SIGKILL)
