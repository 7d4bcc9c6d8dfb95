"""End to end: an `address:` host's netspecd SIGKILLed mid-phase, a component it paused left
stopped. The next netspecd started there ends it at its start, and `ns_control collect` says
so, in what it prints and in run.json; a collect that cannot ask says what is left and who
ends it."""

import json
import os
import signal
import socket
import subprocess
import sys

import psutil
import pytest
from netspec.protocol.exits import kill_run_processes, run_processes
from netspec.protocol.runrecord import read_run
from support import PROGRAMS, ns_control, start_run, wait_for

pytestmark = pytest.mark.e2e

PAUSED_IN_WORK = """\
experiment: leftovers
hosts: {there: {address: "127.0.0.1:PORT"}}
components:
  held: {program: WAITER, args: [work], params: {dir: DIR}}
schedule: [launch, work, collect]
faults:
  - {pause: held, at: {phase: work, after: 0ms}}
"""


def _netspecd(port: int, root, log) -> subprocess.Popen:
    """A daemon at `port` on `root`, its log in `log`; started once listening."""
    with open(log, "w") as err:  # the daemon holds its own copy
        proc = subprocess.Popen([sys.executable, "-m", "netspec.daemon.main", "--listen", f"127.0.0.1:{port}",
                                 "--announce", "--root", str(root)], stdout=subprocess.PIPE, stderr=err,
                                text=True)
    assert json.loads(proc.stdout.readline())["port"] == port, log.read_text()
    return proc


def _stopped(run_id: str) -> list[psutil.Process]:
    return [p for p in run_processes(run_id) if p.status() == psutil.STATUS_STOPPED]


def test_what_a_sigkilled_address_daemon_left_is_ended_by_the_next_and_said_by_collect(tmp_path):
    with socket.socket() as s:  # a port of the test's own; the second daemon takes it again
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = tmp_path / "exp.yaml"
    path.write_text(PAUSED_IN_WORK.replace("PORT", str(port)).replace("WAITER", str(PROGRAMS / "waiter.py"))
                    .replace("DIR", str(tmp_path)))
    first = _netspecd(port, tmp_path / "droot", tmp_path / "first.log")
    run_id = ""
    try:
        proc, record = start_run(path, tmp_path, lambda r: len(r.get("steps", [])) >= 2,
                                 "the run to enter phase 'work'", "--no-merge")
        run_id = record["id"]
        wait_for(lambda: _stopped(run_id), what="the component paused by its fault")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=20)
        proc.communicate(timeout=120)
        assert proc.returncode == 1
        [held] = _stopped(run_id)  # left behind, stopped: nothing ended it
        second = _netspecd(port, tmp_path / "droot", tmp_path / "second.log")
        try:
            assert not run_processes(run_id)  # ended before the daemon listened
            said = (tmp_path / "second.log").read_text()
            assert (f"WARNING run {run_id} (host there): its netspecd (pid {first.pid}) died without ending "
                    f"it: process {held.pid} (held), left stopped by a pause: resumed and ended") in said
            collected = ns_control("collect", cwd=tmp_path)
        finally:
            second.terminate()
            second.wait(timeout=20)
    finally:
        first.kill()
        first.wait(timeout=20)
        if run_id:
            kill_run_processes(run_id, [], signal.SIGKILL)
    told = (f"the netspecd started at 127.0.0.1:{port} after the run's (pid {first.pid}) died ended what "
            f"it left: process {held.pid} (held), left stopped by a pause: resumed and ended; 1 process(es) "
            "of the run ended")
    assert f"host there: nothing salvaged: its files stay on the host: a daemon at an address is reached " \
           f"only through itself; {told}\n" in collected.stdout, collected.stdout
    salvaged = read_run(tmp_path / "runs" / "latest").hosts["there"].salvaged
    assert salvaged is not None and salvaged.swept == [told], salvaged
    # Asked again, with no daemon there: said what is left to whom.
    again = ns_control("collect", cwd=tmp_path)
    assert f"its netspecd at 127.0.0.1:{port} could not be asked what the run left there" in again.stdout
    assert read_run(tmp_path / "runs" / "latest").hosts["there"].salvaged.swept[0] == told
    assert os.path.exists(tmp_path / "work.in")
