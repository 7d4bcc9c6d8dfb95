"""A fleet at scale: local daemons forked from one process, the open-file limit, the
connect deadline and a handshake the daemon dropped, the probe interval's budget, and a
live line that stays readable."""

import asyncio
import json
import os
import re
import signal
import struct
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from netspec.controller.engine.clocks import REFERENCE_EXCHANGES_PER_S, probe_interval_ms
from netspec.controller.engine.summary import LISTED_OK, LiveLine
from netspec.controller.experiment.load import parse
from netspec.controller.hosts import fleet
from netspec.controller.hosts.docker import DockerHost
from netspec.controller.hosts.fleet import DaemonClient
from netspec.controller.hosts.forks import DaemonForks
from netspec.controller.hosts.remote import SSHHost
from netspec.controller.record.progress import Progress
from netspec.daemon.server import MAX_HANDSHAKES
from netspec.protocol import messages as m
from netspec.protocol.errors import AuthError, ConnectionLost, HandshakeDropped
from support import REPO, latest_record, ns_control, start_run, wait_for


def test_forked_daemons_listen_and_end_and_one_that_cannot_start_is_said(key, tmp_path):
    async def scenario():
        forks, pids = DaemonForks(), []
        # Each daemon also ends with this process, should the test fail before it ends them.
        watch = ["--parent-pid", str(os.getpid())]
        try:
            for d in ("d0", "d1", "d2"):
                pids.append(await forks.spawn(["--listen", "127.0.0.1:0", "--announce", "--root",
                                               str(tmp_path / d), *watch], tmp_path / f"{d}.log"))
            ports = [await asyncio.wait_for(forks.port(pid), 20) for pid in pids]
            bad = await forks.spawn(["--listen", "127.0.0.1:no-port", *watch], tmp_path / "bad.log")
            with pytest.raises(ConnectionLost, match="exited 2 at start"):
                await asyncio.wait_for(forks.port(bad), 20)
        finally:
            for pid in pids:
                await forks.terminate(pid)
            await forks.close()
        return pids, ports
    pids, ports = asyncio.run(scenario())
    assert len(set(pids)) == 3 and len(set(ports)) == 3 and all(p > 0 for p in ports)
    assert "invalid parse_listen value" in (tmp_path / "bad.log").read_text()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_daemon_whose_spawn_was_given_up_is_stopped_when_its_fork_is_said(tmp_path):
    def argv(name):
        return ["--listen", "127.0.0.1:0", "--root", str(tmp_path / name), "--parent-pid", str(os.getpid())]

    async def scenario():
        forks = DaemonForks()
        first = await forks.spawn(argv("d0"), tmp_path / "d0.log")  # the fork server is up
        try:
            # A spawn cancelled while the fork server forks (as at the connect deadline).
            given_up = asyncio.create_task(forks.spawn(argv("d1"), tmp_path / "d1.log"))
            await asyncio.sleep(0)
            given_up.cancel()
            async with asyncio.timeout(20):  # its fork is said, then its end
                while not forks._ended:
                    await asyncio.sleep(0.01)
            return first, {pid: f.result() for pid, f in forks._ended.items()}
        finally:
            await forks.terminate(first)
            await forks.close()  # and its reader ends without an error
    first, ended = asyncio.run(scenario())
    # Ended by its SIGTERM: at once if it had no handler for it yet, else by itself.
    assert first not in ended and list(ended.values()) in ([0], [-15])


def test_the_open_file_limit_is_raised_to_the_fleets_need_or_the_hard_limit_said(tmp_path):
    probe = """
import resource
from netspec.controller.hosts.fleet import ensure_fd_limit
from netspec.protocol.errors import NetspecError
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 1024))
print(ensure_fd_limit(100), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
try:
    ensure_fd_limit(1000)
except NetspecError as exc:
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    raised, refused = out.splitlines()
    assert raised == "656 656"
    assert refused.startswith("1000 hosts need about 4256 open files") and "at most 1024" in refused


def test_launch_and_collect_get_more_time_with_more_components_unless_the_file_says(tmp_path):
    def plan(components, launch=""):
        text = "experiment: big\nhosts: {a: {}}\ncomponents:\n"
        text += "".join(f"  c{i}: {{host: a, command: 'true'}}\n" for i in range(components))
        text += f"schedule:\n  - {launch or 'launch'}\n  - sync_clocks\n"
        return {s.phase: s.deadline_s for s in parse(text, tmp_path / "big.yaml").schedule}
    assert plan(10) == {"launch": 30, "sync_clocks": 30, "collect": 60}
    assert plan(600) == {"launch": 80, "sync_clocks": 30, "collect": 110}
    assert plan(600, "{phase: launch, deadline: 5s}")["launch"] == 5


def test_the_reference_answers_within_its_budget_however_many_hosts_probe_it():
    assert probe_interval_ms(200, 9) == 200
    for probers in (100, 1000, 10_000):
        interval = probe_interval_ms(200, probers)
        assert probers * 4 / (interval / 1000) == pytest.approx(REFERENCE_EXCHANGES_PER_S)


def test_the_live_line_lists_hosts_that_failed_and_counts_the_many_that_did_not():
    live = LiveLine()
    texts = [live.text(Progress("step", "tick"))[0]]
    for i in range(40):
        status = "error" if i == 30 else "ok"
        texts.append(live.text(Progress("host", "tick", f"h{i}", status, 0.001 * i, "boom"))[0])
    end, closes = live.text(Progress("step_done", "tick", seconds=0.05))
    line = "".join(texts) + end
    assert closes and len(re.findall(r" h\d+ ok ", line)) == LISTED_OK and "h30 FAIL 30 ms (boom)" in line
    assert "and 31 more ok (slowest h39 39 ms, h38 38 ms, h37 37 ms)" in line


def test_a_host_in_use_by_another_run_is_refused_naming_that_run_unless_asked_to_share_it(
        daemon, experiment, tmp_path):
    host = f'hosts: {{there: {{address: "127.0.0.1:{daemon.port}"}}}}'
    held = experiment(f"""\
        experiment: held
        {host}
        components:
          holds: {{program: ACTOR, args: ["launch,work"], params: {{hang_in: work}}}}
        schedule: [launch, {{phase: work, deadline: 5m}}]
        """, "held.yaml")
    other = experiment(f"""\
        experiment: other
        {host}
        components:
          one: {{program: ACTOR, args: [work]}}
        schedule: [launch, work, collect]
        """, "other.yaml")
    proc, record = start_run(held, tmp_path, lambda r: r.get("steps") and r["steps"][-1]["phase"] == "work",
                             "the first run to hold the host in phase 'work'")
    try:
        runs = str(tmp_path / "others")
        refused = ns_control("run", "--no-merge", str(other), "--runs", runs, cwd=tmp_path)
        assert refused.returncode == 1
        said = next(line for line in refused.stderr.splitlines() if "in use by" in line)
        assert "host there: " in said and f"run '{record['id']}'" in said and "--share-hosts" in said, said
        shared = ns_control("run", "--no-merge", "--share-hosts", str(other), "--runs", runs, cwd=tmp_path)
        assert shared.returncode == 0, shared.stderr
        assert latest_record(tmp_path / "others")["share_hosts"] is True
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert proc.returncode == 130 and daemon.alive


def test_a_campaigns_runs_ask_to_share_their_hosts_when_it_was_run_with_share_hosts(experiment, tmp_path):
    path = experiment("""\
        experiment: shared
        components:
          one: {program: ACTOR, args: [work]}
        schedule: [launch, work]
        repeat: {runs: 2}
        """)
    done = ns_control("run", "--share-hosts", "--quiet", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    records = [json.loads(p.read_text()) for p in (tmp_path / "runs" / "shared").glob("*/run.json")]
    assert len(records) == 2 and all(r["share_hosts"] is True for r in records)



class LoggedDaemon:
    """A real netspecd on a free loopback port, its log in a file the test reads."""

    def __init__(self, root: Path):
        self.log = root / "netspecd.log"
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "netspec.daemon.main", "--listen",
                                          "127.0.0.1:0", "--announce", "--root", str(root / "droot")],
                                         stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.proc.stdout is not None
        self.port = json.loads(self.proc.stdout.readline())["port"]

    def said(self, text: str) -> int:
        """How many lines of its log say `text`."""
        return sum(text in line for line in self.log.read_text().splitlines())


@pytest.fixture
def logged_daemon(key, tmp_path):
    daemon = LoggedDaemon(tmp_path)
    yield daemon
    daemon.proc.send_signal(signal.SIGCONT)  # should the test have failed with it stopped
    daemon.proc.terminate()
    daemon.proc.wait(timeout=20)


def _connected_to(port: int) -> bool:
    return any(c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
               for c in psutil.Process().net_connections(kind="tcp"))


async def _flooded_connect(daemon: LoggedDaemon, key: bytes):
    """Connect to the daemon while it is stopped, then open as many connections as it holds
    in their handshake, each with the start of a frame written: once it goes on, ours is
    the oldest of all in its handshake, and the one it drops for the last of them."""
    loop, flood = asyncio.get_running_loop(), []
    daemon.proc.send_signal(signal.SIGSTOP)  # its kernel queues the connections meanwhile, in order
    try:
        connecting = asyncio.create_task(DaemonClient.connect("t", ("127.0.0.1", daemon.port), key,
                                                              lambda host, event: None, loop.time() + 60))
        async with asyncio.timeout(20):
            while not _connected_to(daemon.port):
                await asyncio.sleep(0.01)
        for _ in range(MAX_HANDSHAKES):
            _, writer = await asyncio.open_connection("127.0.0.1", daemon.port)
            writer.write(struct.pack(">I", 100) + b"\x83")  # bytes unread: an answer in, as ours may be
            flood.append(writer)
    finally:
        daemon.proc.send_signal(signal.SIGCONT)
    return connecting, flood


DROPPED = "the oldest of 64 connections in their handshake"


def test_a_controller_whose_handshake_a_flooded_daemon_dropped_gets_in_on_its_next_try(logged_daemon, key):
    async def scenario():
        connecting, flood = await _flooded_connect(logged_daemon, key)
        try:
            async with asyncio.timeout(60):
                client = await connecting
            serving = asyncio.create_task(client.serve())
            hello = await client.request(m.HELLO, asyncio.get_running_loop().time() + 20)
            await client.close()
            await serving
            return client.dropped, hello
        finally:
            for writer in flood:
                writer.close()
    dropped, hello = asyncio.run(scenario())
    assert dropped == 1  # the first handshake was the one dropped: the flood did what it should
    assert hello.pid == logged_daemon.proc.pid
    assert logged_daemon.said(DROPPED) >= 1


def test_a_key_the_daemon_refuses_is_not_tried_again(logged_daemon, key):
    async def scenario():
        connecting, flood = await _flooded_connect(logged_daemon, bytes(32))
        try:
            with pytest.raises(AuthError, match="refused our key") as refused:
                async with asyncio.timeout(60):
                    await connecting
            return refused.value
        finally:
            for writer in flood:
                writer.close()
    refused = asyncio.run(scenario())
    assert not isinstance(refused, HandshakeDropped)
    # Dropped once for the flood, tried again and refused: not tried a third time.
    wait_for(lambda: logged_daemon.said(": authentication failed"), what="the refusal in the daemon's log")
    assert logged_daemon.said(": authentication failed") == 1


def test_the_schemas_connect_deadline_default_is_the_figures_the_fleet_uses():
    schema = json.loads((REPO / "controller" / "experiment" / "experiment.schema.json").read_text())
    said = schema["properties"]["connect_deadline"]["description"]
    found = re.findall(r"(\d+) s for an? (?:local or )?`?(\w+):?`? host", said)
    assert {kind: float(s) for s, kind in found} == {
        "address": fleet.AddressHost.start_deadline_s, "docker": DockerHost.start_deadline_s,
        "ssh": SSHHost.start_deadline_s}
    assert fleet.LocalHost.start_deadline_s == fleet.AddressHost.start_deadline_s  # "a local or `address:`"
    per_host, beyond = re.search(r"plus (\d+) ms per host beyond (\d+)", said).groups()
    assert (float(per_host) / 1e3, int(beyond)) == (fleet.CONNECT_PER_HOST_S, fleet.CONNECT_HOSTS_FREE)
