"""A fault's pressure on its host (daemon/faults.py dispatches it): CPU, memory or disk load
in processes of their own, each spawned and reaped here (pyperf's popen_killer: whatever
ends the pressure, a reset's `kill` or the daemon's death, ends its processes too), its
effect measured from what the kernel counted of them.

The processes carry the run's id (a reset ends them, and the daemon's end, however it comes,
by their death signal): `workers` busy loops (cpu), `size` bytes touched and held resident
(memory), `size` bytes written and synced to a file in the run's directory, removed after
(disk); what each did is measured from its rusage and the file's blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.exits import signal_pids

from .orphans import SPAWNED

PRESSURE_GRACE_S = 5.0  # past its length, before a pressure's process is killed
REAP_EVERY_S = 0.01  # how often a pressure's process is looked for ended
MEMORY_SHARE = 0.5  # a memory pressure takes at most this share of MemAvailable
DISK_SHARE = 0.5  # a disk pressure takes at most this share of the free space
# Each pressure's first lines: its death signal, SIGKILL when the daemon's thread that spawned
# it ends (PR_SET_PDEATHSIG, 1), which is the loop's, so the daemon's own end however it comes
# (a SIGKILL, which no reset follows); and if the daemon was gone before the signal was set
# (its pid, argv[1], no longer the parent), an exit at once.
_DEATH_SIGNAL = ("import ctypes, os, signal, sys\nctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"
                 "if os.getppid() != int(sys.argv.pop(1)): os._exit(1)\n")
_CPU = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end: pass\n"
_MEMORY = ("import mmap, sys, time\nn, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])\n"
           "b = mmap.mmap(-1, n)\nfor i in range(0, n, mmap.PAGESIZE): b[i] = 1\n"
           "time.sleep(max(0.0, end - time.monotonic()))\n")
_DISK = ("import os, sys, time\n"
         "path, n, end = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])\n"
         "fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)\nchunk = os.urandom(1 << 20)\n"
         "left = n\nwhile left > 0: left -= os.write(fd, chunk[:min(left, len(chunk))])\n"
         "os.fsync(fd)\nos.close(fd)\ntime.sleep(max(0.0, end - time.monotonic()))\n")


class Pressures:
    """The pressures of one run on this host and the processes they started. Owned by the
    run's Faults: `apply` for each, `kill` and `remove_files` at its close."""

    def __init__(self, run_id: str, host: str, directory: Path):
        self.run_id, self.host, self.directory = run_id, host, directory
        self.pids: set[int] = set()  # processes still running

    def kill(self) -> None:
        """Every pressure's process still running SIGKILLed (its task reaps it)."""
        signal_pids(list(self.pids), signal.SIGKILL)

    def remove_files(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    async def apply(self, request: k.Fault, report: k.FaultDone,
                    so_far: Callable[[k.FaultDone], None]) -> None:
        """Pressure `request` done: its processes spawned, `report` said `so_far` once they
        are, then waited for (each reaped here, SIGKILLed PRESSURE_GRACE_S past its length)
        and what the kernel counted of them measured into `report`."""
        assert request.for_s is not None
        kind, for_s, size = request.fault, request.for_s, request.size or 0
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"disk-{request.index}"
        if kind == "memory" and size > (room := _mem_available() * MEMORY_SHARE):
            report.error = f"memory: {size} bytes is more than half of this host's available memory " \
                           f"({room:.0f} bytes): not done"
            return
        if kind == "disk" and size > (room := shutil.disk_usage(self.directory).free * DISK_SHARE):
            report.error = f"disk: {size} bytes is more than half of the free space of {self.directory} " \
                           f"({room:.0f} bytes): not done"
            return
        argv = {"cpu": [_CPU, str(for_s)], "memory": [_MEMORY, str(size), str(for_s)],
                "disk": [_DISK, str(path), str(size), str(for_s)]}[kind]
        count = request.workers or 1 if kind == "cpu" else 1
        pids = [self._spawn(argv) for _ in range(count)]
        report.effect = f"{count} process(es) started"
        so_far(report)
        usage = await asyncio.gather(*(self._reap(pid, for_s + PRESSURE_GRACE_S) for pid in pids))
        report.ended_ns = time.time_ns()
        wall = (report.ended_ns - report.done_ns) / 1e9  # type: ignore[operator]
        cpu = sum(u.ru_utime + u.ru_stime for u in usage)
        rss = max(u.ru_maxrss for u in usage) * 1024.0  # the kernel's peak resident set, in kB
        report.measured = {"wall_s": wall, "cpu_s": cpu, "rss_bytes": rss}
        if kind == "disk":
            with contextlib.suppress(OSError):
                report.measured["written_bytes"] = float(path.stat().st_blocks * 512)
            path.unlink(missing_ok=True)
        report.effect = {"cpu": f"{count} worker(s) busy {cpu:.2f} s of CPU in {wall:.2f} s",
                         "memory": f"{report.measured['rss_bytes'] / 2**20:.1f} MiB resident at most, "
                                   f"for {wall:.2f} s",
                         "disk": f"{report.measured.get('written_bytes', 0) / 2**20:.1f} MiB on disk, "
                                 f"removed after {wall:.2f} s"}[kind]

    def _spawn(self, argv: list[str]) -> int:
        env = {**os.environ, m.RUN_ENV: self.run_id, m.HOST_ENV: self.host}
        code, *args = argv
        command = [sys.executable, "-c", _DEATH_SIGNAL + code, str(os.getpid()), *args]
        pid = os.posix_spawn(sys.executable, command, env)
        SPAWNED.add(pid)  # ours to reap, not the orphans' reaper's
        self.pids.add(pid)
        return pid

    async def _reap(self, pid: int, within: float) -> Any:
        """The pressure process `pid`'s resource usage (os.wait4's) once it ended, looked
        for every REAP_EVERY_S; SIGKILL if it had not within `within` seconds."""
        loop = asyncio.get_running_loop()
        killed, end = False, loop.time() + within
        try:
            while True:
                done, _, usage = os.wait4(pid, os.WNOHANG)
                if done:
                    return usage
                if loop.time() >= end and not killed:
                    signal_pids([pid], signal.SIGKILL)  # a SIGKILL ends it: waited for, then
                    killed = True
                await asyncio.sleep(REAP_EVERY_S)
        finally:
            self.pids.discard(pid)
            SPAWNED.discard(pid)


def _mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0

