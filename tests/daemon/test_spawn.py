"""Spawning a component's process: what it is given, its exit seen while a child of its own
still holds its pipes, and a program that cannot start leaving nothing open."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from netspec.daemon.orphans import SPAWNED
from netspec.daemon.spawn import ExecFailed, spawn
from netspec.protocol import messages as m
from netspec.protocol.kinds import ComponentSpec
from support import session_run_id

RUN = session_run_id("run-spawn")


def test_a_spawned_command_gets_its_run_in_its_environment_and_its_exit_is_seen_before_its_pipes_close(
        tmp_path: Path) -> None:
    # The shell exits at once; the sleep it leaves behind holds stdout open for a minute.
    script = f'printf "%s %s %s" "${m.RUN_ENV}" "${m.COMPONENT_ENV}" "${m.PARAMS_ENV}"; sleep 60 &'
    spec = ComponentSpec(name="plain", argv=["sh", "-c", script], params={"n": 3})
    expected = f"{RUN} plain {json.dumps({'n': 3})}"

    async def scenario():
        spawned = await spawn(spec, RUN, tmp_path, tmp_path / "work", {"EXTRA": "1"})
        try:
            assert spawned.proc.stdout is not None and spawned.ours is None
            async with asyncio.timeout(10):
                code = await spawned.exit_code
                said = await spawned.proc.stdout.readexactly(len(expected))
            return code, said.decode(), spawned.proc.pid in SPAWNED, spawned.proc.stdout.at_eof()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(spawned.proc.pid, signal.SIGKILL)  # the sleep, in the shell's group
            for f in spawned.outputs:
                f.close()
            async with asyncio.timeout(10):
                await spawned.proc.wait()

    code, said, still_tracked, pipe_ended = asyncio.run(scenario())
    assert code == 0 and not still_tracked and not pipe_ended
    assert said == expected
    assert (tmp_path / "work").is_dir() and (tmp_path / "stdout").exists()


def test_a_program_that_cannot_start_leaves_no_file_or_socket_open(tmp_path: Path) -> None:
    # Aware, so that a socketpair is made too; the program is there but not executable.
    program = tmp_path / "not-executable.sh"
    program.write_text("#!/bin/sh\n")
    spec = ComponentSpec(name="aware", program=str(program), argv=[str(program)])
    assert spec.aware
    fds = set(os.listdir("/proc/self/fd"))

    async def scenario():
        with pytest.raises(ExecFailed) as failed:
            await spawn(spec, RUN, tmp_path, tmp_path / "work", {})
        return failed.value

    error = asyncio.run(scenario())
    assert isinstance(error.error, PermissionError) and error.__cause__ is error.error
    assert set(os.listdir("/proc/self/fd")) == fds


def test_an_aware_component_has_its_end_of_a_socketpair_and_the_daemon_keeps_only_its_own(
        tmp_path: Path) -> None:
    # Its argv is what runs: a shell that exits 0 only if NETSPEC_FD names a socket it holds.
    spec = ComponentSpec(name="aware", program="component.py",
                         argv=["sh", "-c", f'test -S /proc/self/fd/"${m.FD_ENV}"'])

    async def scenario():
        spawned = await spawn(spec, RUN, tmp_path, tmp_path / "work", {})
        try:
            assert spawned.ours is not None
            async with asyncio.timeout(10):
                code = await spawned.exit_code
            # The component's end was closed in the daemon once passed: with the component
            # gone, nothing holds it, and the daemon's end reads the end of the stream.
            spawned.ours.settimeout(10)
            return code, spawned.ours.recv(1)
        finally:
            if spawned.ours is not None:
                spawned.ours.close()
            for f in spawned.outputs:
                f.close()
            async with asyncio.timeout(10):
                await spawned.proc.wait()

    assert asyncio.run(scenario()) == (0, b"")


DAEMON = """
import asyncio, sys
from pathlib import Path
from netspec.daemon.spawn import spawn
from netspec.protocol.kinds import ComponentSpec
SCRIPT = 'trap "echo TERM > got; exit 0" TERM; echo $0 > argv0; sleep 30 & wait'
async def main():
    spawned = await spawn(ComponentSpec(name="left", argv=["sh", "-c", SCRIPT]), sys.argv[1],
                          Path(sys.argv[2]), Path(sys.argv[2]), {})
    print(spawned.proc.pid, flush=True)
    await asyncio.sleep(60)
asyncio.run(main())
"""


def test_a_component_gets_sigterm_when_its_daemon_dies_and_keeps_its_argv(tmp_path: Path) -> None:
    """Its death signal, set before its program runs (setpriv, or a function before exec
    where the host has none), outlives the exec: the daemon's SIGKILL is its SIGTERM."""
    daemon = subprocess.Popen([sys.executable, "-c", DAEMON, RUN, str(tmp_path)], stdout=subprocess.PIPE,
                              text=True)
    pid = None
    try:
        pid = int(daemon.stdout.readline())
        deadline = time.monotonic() + 10
        while not (tmp_path / "argv0").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        daemon.kill()
        while not (tmp_path / "got").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (tmp_path / "got").read_text() == "TERM\n", pid
        assert (tmp_path / "argv0").read_text() == "sh\n"
    finally:
        daemon.kill()
        daemon.wait(timeout=10)
        daemon.stdout.close()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
