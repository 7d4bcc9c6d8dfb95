"""Spawning a component's process: what it is given, its exit seen while a child of its own
still holds its pipes, and a program that cannot start leaving nothing open."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
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
