"""Spawning one component's process: its environment, its output files and (an aware
component's) socketpair, in a process group of its own that gets SIGTERM if the daemon dies;
and the notice of its exit that does not wait for its pipes to close.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import json
import os
import shutil
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from netspec.protocol import messages as m
from netspec.protocol.kinds import ComponentSpec

from .facts import host_address
from .orphans import SPAWNED

PR_SET_PDEATHSIG = 1
# util-linux's setpriv sets the death signal and execs the program: the child is then forked
# the fast way (vfork). A Python function to run before exec makes it fork the daemon whole,
# 6-8 ms a start here against 0.5 ms, and a scheduled `start` fault's effect was 10 ms late.
SETPRIV = shutil.which("setpriv")


class ExecFailed(Exception):
    """The program could not be started (its `error` says why); nothing made for it is
    left open."""

    def __init__(self, error: OSError):
        super().__init__(str(error))
        self.error = error


@dataclass
class Spawned:
    """A component's process, just spawned, and what it was spawned with."""

    proc: asyncio.subprocess.Process
    exit_code: asyncio.Future[int]  # set as it exits, whoever still holds its pipes
    outputs: list[BinaryIO]  # its stdout and stderr files, for its output's pumps to close
    ours: socket.socket | None  # the daemon's end of an aware component's socketpair


def with_death_signal(argv: list[str], env: dict[str, str],
                       workdir: Path) -> tuple[list[str], Callable[[], None] | None]:
    """The argv to exec and the function to run before it (None: none) for a child that
    gets SIGTERM when the daemon dies: through setpriv where this host has it (the daemon
    dying between the fork and setpriv's prctl leaves it to the gatherer, below), else
    `_end_with`. setpriv would report a program it cannot exec by its own exit, 127: the
    program is looked up here first, as exec will (setpriv's, by the same PATH and work
    directory, its argv[0] left as it was).

    Raises:
        OSError: the program is not there, or not executable (FileNotFoundError,
            PermissionError).
    """
    if SETPRIV is None:
        return argv, _end_with(os.getpid())
    name = argv[0]
    found = str(workdir / name) if "/" in name else shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None or not os.path.isfile(found):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
    if not os.access(found, os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)
    return [SETPRIV, "--pdeathsig", "TERM", "--", *argv], None


def _end_with(daemon_pid: int) -> Callable[[], None]:
    """What the child runs before exec: get SIGTERM if the daemon dies without resetting
    (killed, out of memory), so that nodelib flushes its streams as it exits, as at any
    reset; whatever ignores it is ended by whoever gathers the lost host's files, with
    SIGKILL after a grace (controller/gather/salvage.py, `netspecd --kill-run`)."""
    def end_with_daemon() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != daemon_pid:  # the daemon died before the prctl: no signal will come
            os.kill(os.getpid(), signal.SIGTERM)
    return end_with_daemon


class _ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Tells when the process exits. asyncio's `Process.wait()` (3.11) also waits until
    the pipes close, which a background child can put off for as long as it lives."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        super().__init__(limit=2**16, loop=loop)
        self.exit_code: asyncio.Future[int] = loop.create_future()

    def process_exited(self) -> None:
        # Read first: the base class drops the transport once the pipes are closed too.
        code = self._transport.get_returncode()
        SPAWNED.discard(self._transport.get_pid())
        super().process_exited()
        if not self.exit_code.done():
            self.exit_code.set_result(code)


async def spawn(spec: ComponentSpec, run_id: str, directory: Path, workdir: Path,
                env: dict[str, str], again: bool = False) -> Spawned:
    """Spawn `spec`'s program in `workdir`, in a session of its own.

    Args:
        spec: the component: its argv, its own environment and parameters, and whether it
            is aware (then it gets one end of a socketpair, its fd named by NETSPEC_FD).
        run_id: the run it is part of, in its environment.
        directory: the component's directory: its stdout and stderr files go there.
        workdir: where it runs (made if it is not there).
        env: what the supervisor adds to its environment (what only it knows).
        again: it is started again (a restart fault): its output files are appended to.

    Returns:
        The process, the future of its exit code, its output files and, if aware, the
        daemon's end of its socketpair.

    Raises:
        ExecFailed: the program cannot be started.
        OSError: its work directory, output files or socketpair cannot be made.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    # Opened before the process is: its output has somewhere to go whatever happens to
    # the directory meanwhile (a reset that cleans it).
    mode = "ab" if again else "wb"  # a restarted component's output follows its first process's
    outputs = [open(directory / name, mode) for name in ("stdout", "stderr")]  # noqa: SIM115 - the pumps close them
    env = {**os.environ, **spec.env, m.RUN_ENV: run_id,
           m.COMPONENT_ENV: spec.name, m.PARAMS_ENV: json.dumps(spec.params),
           m.HOST_ADDRESS_ENV: host_address(), **env,
           "PYTHONUNBUFFERED": "1"}
    pass_fds: tuple[int, ...] = ()
    ours = theirs = None
    if spec.aware:
        ours, theirs = socket.socketpair()
        env[m.FD_ENV] = str(theirs.fileno())
        pass_fds = (theirs.fileno(),)
    loop = asyncio.get_running_loop()
    try:
        argv, before_exec = with_death_signal(spec.argv, env, workdir)
        transport, protocol = await loop.subprocess_exec(
            lambda: _ExitProtocol(loop), *argv, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=workdir,
            env=env, pass_fds=pass_fds, start_new_session=True, preexec_fn=before_exec)
    except OSError as exc:
        if ours:
            ours.close()
        for f in outputs:
            f.close()
        raise ExecFailed(exc) from exc
    finally:
        if theirs:
            theirs.close()
    proc = asyncio.subprocess.Process(transport, protocol, loop)
    if not protocol.exit_code.done():
        SPAWNED.add(proc.pid)
    return Spawned(proc, protocol.exit_code, outputs, ours)


def python_argv(program: str, args: list[str]) -> list[str]:
    """A .py program runs under the daemon's own interpreter, which has nodelib."""
    return [sys.executable, program, *args] if program.endswith(".py") else [program, *args]
