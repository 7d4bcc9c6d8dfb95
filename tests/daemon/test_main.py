"""netspecd's command line: the lifeline, the state file, --kill-run, a key for one run."""

import asyncio
import datetime
import json
import os
import re
import subprocess
import sys
import time

import pytest
from netspec.controller.hosts.fleet import DaemonClient
from netspec.protocol import messages as m
from netspec.protocol.auth import new_run_key
from netspec.protocol.errors import AuthError, RemoteError
from support import session_run_id, wait_for

NETSPECD = [sys.executable, "-m", "netspec.daemon.main", "--listen", "127.0.0.1:0"]


def test_the_daemon_stops_when_its_lifeline_closes(key, tmp_path):
    proc = subprocess.Popen([*NETSPECD, "--announce", "--lifeline", "--root", str(tmp_path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    assert json.loads(proc.stdout.readline())["pid"] == proc.pid
    # Its loop watches the lifeline: no thread beside its own, which nothing would end.
    assert os.listdir(f"/proc/{proc.pid}/task") == [str(proc.pid)]
    proc.stdin.close()  # what the end of the SSH channel looks like to it
    assert proc.wait(timeout=10) == 0


def test_a_daemon_whose_lifeline_is_a_file_reads_it_to_its_end_and_stops(key, tmp_path):
    (tmp_path / "stdin").write_bytes(b"x" * 10_000)
    with open(tmp_path / "stdin", "rb") as stdin:
        proc = subprocess.Popen([*NETSPECD, "--lifeline", "--root", str(tmp_path)], stdin=stdin,
                                stderr=subprocess.DEVNULL)
    assert proc.wait(timeout=10) == 0


def test_the_state_file_says_where_the_daemon_listens_while_it_runs(key, tmp_path):
    state = tmp_path / "daemon.json"
    proc = subprocess.Popen([*NETSPECD, "--state-file", str(state), "--root", str(tmp_path)],
                            stderr=subprocess.DEVNULL)
    found = wait_for(lambda: state.exists() and json.loads(state.read_text()), what="the state file")
    assert found["pid"] == proc.pid and found["port"] > 0
    proc.terminate()
    assert proc.wait(timeout=10) == 0
    assert not state.exists()


def test_each_line_of_the_daemons_log_carries_its_time_in_utc_to_the_microsecond(key, tmp_path):
    before = time.time()
    log, refused = tmp_path / "netspecd.log", tmp_path / "refused.log"
    with open(log, "w") as stderr:
        proc = subprocess.Popen([*NETSPECD, "--announce", "--root", str(tmp_path)],
                                stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        json.loads(proc.stdout.readline())
        wait_for(lambda: "listening on" in log.read_text(), what="the daemon's log of where it listens")
        # A daemon told an address this machine does not have (TEST-NET-1): what it says as
        # it gives up is a line of its log too.
        with open(refused, "w") as stderr:
            second = subprocess.run([*NETSPECD[:-2], "--listen", "192.0.2.1:0", "--root",
                                     str(tmp_path / "second")], stderr=stderr, timeout=30)
        assert second.returncode == 2
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    after = time.time()
    lines = log.read_text().splitlines() + refused.read_text().splitlines()
    assert any(line.endswith("ERROR cannot listen on 192.0.2.1:0: Cannot assign requested address")
               for line in lines), lines
    for line in lines:
        stamp, _, said = line.partition(" ")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp), line
        assert before <= datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() <= after
        assert said.startswith("netspecd["), line


def test_kill_run_ends_every_process_of_that_run(tmp_path):
    left, kept = session_run_id("run-left"), session_run_id("run-other")
    leftover = subprocess.Popen(["sleep", "300"], env={"NETSPEC_RUN": left, "PATH": "/usr/bin:/bin"},
                                start_new_session=True)
    other = subprocess.Popen(["sleep", "300"], env={"NETSPEC_RUN": kept, "PATH": "/usr/bin:/bin"})
    try:
        done = subprocess.run([*NETSPECD, "--kill-run", left], timeout=30)
        assert done.returncode == 0
        assert leftover.wait(timeout=10) < 0
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_the_daemon_and_what_components_import_need_only_the_daemons_dependencies():
    # A remote host gets netspec without its dependencies and these alone (wheels.py): here
    # every other installed distribution is hidden, as it is there, and the daemon's side
    # must still import (and a daemon that loaded numpy would triple its memory).
    from netspec.controller.hosts.wheels import DAEMON_DEPENDENCIES
    probe = f"""
import importlib.abc, importlib.metadata, sys
allowed = {{"netspec", *{list(DAEMON_DEPENDENCIES)!r}}}
hidden = {{top for top, dists in importlib.metadata.packages_distributions().items()
          if not {{d.lower() for d in dists}} & allowed}}
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in hidden:
            raise ImportError(f"{{name}} is not installed on a remote host")
sys.meta_path.insert(0, Hide())
import netspec.daemon.main, netspec.nodelib, netspec.camp
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_fork_server_speaks_only_of_the_daemons_it_forked(key, tmp_path):
    # Its warm-up runs a child of its own (platform's `uname -p`): that child's end must not
    # reach the controller as a daemon's exit.
    server = subprocess.Popen([sys.executable, "-m", "netspec.daemon.forkserver"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        server.stdin.write(json.dumps({"tag": 1, "argv": ["--listen", "127.0.0.1:0", "--announce",
                                                          "--root", str(tmp_path / "root")],
                                       "log": str(tmp_path / "log")}) + "\n")
        server.stdin.flush()
        said = [json.loads(server.stdout.readline()) for _ in range(2)]
        pid = next(m["pid"] for m in said if m.get("tag") == 1)
        assert any(m.get("port") and m.get("pid") == pid for m in said), said
        subprocess.run(["kill", "-TERM", str(pid)], check=True)
        ended = json.loads(server.stdout.readline())
    finally:
        server.stdin.close()
        server.wait(timeout=10)
    assert ended["exited"] == pid, [*said, ended]


def test_a_daemon_given_a_run_key_removes_its_file_takes_that_key_alone_and_sets_up_that_run_alone(
        key, tmp_path):
    run, other = session_run_id("r-key"), session_run_id("r-other")
    run_key, path = new_run_key(), tmp_path / "run.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (run_key.hex() + "\n").encode())
    os.close(fd)
    proc = subprocess.Popen([*NETSPECD, "--announce", "--run-key", str(path), "--only-run", run,
                             "--root", str(tmp_path / "root")], stdout=subprocess.PIPE, text=True)
    try:
        port = json.loads(proc.stdout.readline())["port"]
        assert not path.exists()  # read, then gone: nothing the run starts later finds it

        async def scenario():
            with pytest.raises(AuthError):  # the long-term key opens nothing here
                await DaemonClient.connect("t", ("127.0.0.1", port), key, lambda h, e: None)
            client = await DaemonClient.connect("t", ("127.0.0.1", port), run_key, lambda h, e: None)
            serving = asyncio.create_task(client.serve())
            deadline = asyncio.get_running_loop().time() + 20
            with pytest.raises(RemoteError) as refused:
                await client.request(m.SETUP, deadline, run=other, host="a", components=[])
            await client.request(m.SETUP, deadline, run=run, host="a", components=[])
            await client.request(m.RESET, deadline, clean=True)
            await client.close()
            await serving
            return str(refused.value)

        said = asyncio.run(scenario())
        assert f"this daemon was started for run {run!r} alone, with a key of that run's: it sets up no " \
               f"other (asked for {other!r})" in said
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_a_daemon_takes_its_run_key_from_the_first_line_of_stdin_and_the_rest_is_its_lifeline(tmp_path):
    run_key = new_run_key()
    proc = subprocess.Popen([*NETSPECD, "--announce", "--run-key", "-", "--lifeline", "--root",
                             str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    proc.stdin.write(run_key.hex() + "\n")
    proc.stdin.flush()
    port = json.loads(proc.stdout.readline())["port"]

    async def connect() -> None:
        client = await DaemonClient.connect("t", ("127.0.0.1", port), run_key, lambda h, e: None)
        await client.close()

    asyncio.run(connect())
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0
