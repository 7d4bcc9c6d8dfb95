"""Every lifetime owned: a run stopped mid-step, by a failure or a cancellation in-process
or by Ctrl-C to `ns_control`, leaves no task, timer, thread, open file or process behind it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from netspec.controller.engine.run import Run
from netspec.controller.experiment.load import parse
from netspec.controller.record.progress import Progress
from netspec.controller.record.rundir import RunDir
from netspec.protocol.errors import StepFailed
from netspec.protocol.exits import run_processes
from support import latest_record, load_record, wait_for

pytestmark = pytest.mark.e2e

HANGS_IN_WORK = """\
experiment: lifetimes
hosts: {a: {}, b: {}}
components:
  one: {host: a, program: ACTOR, args: ["launch,work,collect"], params: {hang_in: work}}
  two: {host: b, program: ACTOR, args: ["launch,work,collect"]}
schedule: [launch, {phase: work, deadline: 5m}, collect]
"""


def open_fds(pid: int | str = "self") -> set[str]:
    return set(os.listdir(f"/proc/{pid}/fd"))


def fds_left(before: set[str], within_s: float = 2.0) -> dict[str, str]:
    """The fds open now that were not `before`, each with what it is (its /proc link): given
    `within_s` to go, for one a thread older than the run (this worker's own: pytest's,
    execnet's) has open for a moment, which is none of the run's."""
    deadline = time.monotonic() + within_s
    while True:
        extra = open_fds() - before
        if not extra or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    found = {}
    for fd in sorted(extra, key=int):
        with contextlib.suppress(OSError):
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
    return found


def live_timers(loop: asyncio.AbstractEventLoop) -> list[asyncio.TimerHandle]:
    """The loop's timers not cancelled: asyncio has no public view of them."""
    return [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]


def stop_mid_step(path: Path, key: bytes, runs: Path, cancel: bool = True) -> dict:
    """Run the experiment at `path` in this process until it fails, or cancel it once its
    step 'work' is under way, and check that it left nothing behind it: no task or timer
    of the loop, no thread, no open file, no child process, none of its processes; its
    run.json."""
    plan = parse(path.read_text(), path)
    threads, fds = set(threading.enumerate()), open_fds()

    async def stopped() -> tuple[RunDir, list[asyncio.Task], list[asyncio.TimerHandle]]:
        rundir = RunDir.create(runs, plan.name, plan.text)
        in_work = asyncio.Event()

        def progress(event: Progress) -> None:
            if event.kind == "step" and event.step == "work":
                in_work.set()
        run = asyncio.create_task(Run(plan, rundir, key, progress).execute())
        if cancel:
            async with asyncio.timeout(120):
                await in_work.wait()
            run.cancel()
        with pytest.raises(asyncio.CancelledError if cancel else StepFailed):
            await run
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        return rundir, left, live_timers(asyncio.get_running_loop())

    rundir, tasks, timers = asyncio.run(stopped())
    assert tasks == [] and timers == []
    assert set(threading.enumerate()) - threads == set()
    assert fds_left(fds) == {}
    assert psutil.Process().children(recursive=True) == []
    assert not run_processes(rundir.id)
    record = latest_record(runs)
    assert [s["status"] for s in record["steps"]] == ["ok", "failed"]
    assert (rundir.path / "hosts" / "a" / "one" / "stderr").exists()  # gathered after the stop
    return record


def test_a_run_cancelled_mid_step_ends_interrupted_leaving_no_task_timer_thread_fd_or_process(
        experiment, key, tmp_path):
    record = stop_mid_step(experiment(HANGS_IN_WORK), key, tmp_path / "runs")
    assert record["status"] == "interrupted"
    assert record["error"]["message"] == "cancelled in phase 'work'"


def test_a_run_failing_mid_step_leaves_no_task_timer_thread_fd_or_process(experiment, key, tmp_path):
    text = HANGS_IN_WORK.replace("{hang_in: work}", "{fail_in: work}").replace(
        'two: {host: b, program: ACTOR, args: ["launch,work,collect"]}',
        'two: {host: b, program: ACTOR, args: ["launch,work,collect"], params: {hang_in: work}}')
    record = stop_mid_step(experiment(text), key, tmp_path / "runs", cancel=False)
    assert record["status"] == "failed" and record["error"]["phase"] == "work"


def test_a_run_over_ssh_cancelled_mid_step_leaves_no_tunnel_pump_or_connection_thread(
        ssh_env, experiment, key, tmp_path):
    path = experiment(HANGS_IN_WORK.replace("a: {}", f"a: {{ssh: {ssh_env[0].alias}}}"))
    assert stop_mid_step(path, key, tmp_path / "runs")["status"] == "interrupted"


def test_ctrl_c_mid_step_ends_every_process_of_the_run_and_gives_the_shared_daemon_its_fds_back(
        daemon, experiment, tmp_path):
    path = experiment(HANGS_IN_WORK.replace("b: {}", f'b: {{address: "127.0.0.1:{daemon.port}"}}'))
    fds = open_fds(daemon.proc.pid)
    proc = subprocess.Popen([sys.executable, "-m", "netspec.controller.cli", "run", "--no-merge", str(path)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def in_work() -> dict | None:
            latest = tmp_path / "runs" / "latest"
            record = load_record(latest) if (latest / "run.json").exists() else {}
            steps = record.get("steps", [])
            working = steps and steps[-1]["phase"] == "work" and len(run_processes(record["id"])) == 2
            return record if working else None
        record = wait_for(in_work, what="the run to reach phase 'work'")
        # Its fork server, the local daemon it forked, and each host's component.
        started = {p.pid: p for p in [*psutil.Process(proc.pid).children(recursive=True),
                                      psutil.Process(record["hosts"]["a"]["daemon_pid"]),
                                      *run_processes(record["id"])]}
        assert len(started) == 4, started
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert latest_record(tmp_path / "runs")["status"] == "interrupted"
    assert [pid for pid, p in started.items() if _alive(p)] == []
    # The daemon ends the session as the controller hangs up: its connection, the
    # component's channel and pipes, its output files.
    wait_for(lambda: open_fds(daemon.proc.pid) == fds, timeout=10,
             what=f"netspecd's fds back to {sorted(fds)}")
    assert daemon.alive


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
