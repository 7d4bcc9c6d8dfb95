"""Spawning one component's process: its environment, its output files and (an aware
component's) socketpair, in a process group of its own that gets SIGTERM if the daemon dies;
and the notice of its exit that does not wait for its pipes to close.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
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
        transport, protocol = await loop.subprocess_exec(
            lambda: _ExitProtocol(loop), *spec.argv, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=workdir,
            env=env, pass_fds=pass_fds, start_new_session=True, preexec_fn=_end_with(os.getpid()))
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
