"""Experiments over SSH on real namespaced hosts: each has its own address and sshd."""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from netspec.datastream.reader import StreamReader
from support import REPO, latest_record, ns_control, wait_for

pytestmark = pytest.mark.e2e

STIMULUS = REPO / "experiments" / "stimulus_response" / "stimulus.py"

ACROSS = f"""\
experiment: across
hosts: {{a: {{ssh: netspec-h1}}, b: {{ssh: netspec-h2}}}}
components:
  server: {{host: a, program: {STIMULUS}, args: [--role, server]}}
  client: {{host: b, program: {STIMULUS}, args: [--role, client], params: {{count: 200}}}}
streams:
  stim: {{enable: [STIM]}}
schedule:
  - launch
  - start_logging
  - {{phase: listen, components: [server]}}
  - {{phase: run, components: [client]}}
  - stop_logging
  - collect
"""


def netns_pids(host) -> set[int]:
    out = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def test_stimulus_response_runs_across_two_hosts_over_ssh(ssh_env, experiment, tmp_path):
    done = ns_control("run", str(experiment(ACROSS)), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    run = tmp_path / "runs" / "latest"
    record = latest_record(tmp_path / "runs")
    assert f"a/server: listening on {ssh_env[0].address}:" in done.stdout
    assert json.loads((run / "hosts" / "b" / "facts.json").read_text())["address"] == ssh_env[1].address
    client = next((run / "hosts" / "b" / "streams").glob("stim.client.*.ds"))
    assert sum(r.entity.full_name == "STIM/rtt" for r in StreamReader(client)) == 200
    assert (run / "hosts" / "a" / "server" / "stdout").exists()
    assert "200 round trips" in (run / "hosts" / "b" / "client" / "stdout").read_text()
    assert (run / "hosts" / "a" / "netspecd.log").exists()
    # Only each host's sshd is left: the daemons and components ended with the run.
    for host in ssh_env[:2]:
        assert netns_pids(host) == {host.sshd_pid()}, record["id"]
    # Another controller fetches the run from this one over SSH and merges it there.
    short = record["id"][-6:]
    fetched = ns_control("fetch", short, "--from", f"netspec-h1:{tmp_path / 'runs'}", "--runs", "elsewhere",
                         "--to", "result", cwd=tmp_path)
    assert fetched.returncode == 0, fetched.stderr
    copy = tmp_path / "elsewhere" / "across" / record["id"]
    assert f"fetched {record['id']} from netspec-h1" in fetched.stdout
    original = {p.relative_to(run.resolve()): p.read_bytes() for p in run.resolve().rglob("*")
                if p.is_file() and "merged" not in p.parts}
    assert {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()} == original
    assert (tmp_path / "result" / "events.parquet").is_file() and "merged: " in fetched.stdout
    missing = ns_control("fetch", "nosuchrun", "--from", f"netspec-h1:{tmp_path / 'runs'}", cwd=tmp_path)
    assert missing.returncode == 1 and "netspec-h1: no run 'nosuchrun' under" in missing.stderr


def test_a_host_whose_sshd_is_down_fails_with_its_name(own_host, experiment, tmp_path):
    own_host.stop_sshd()
    text = ACROSS.replace("netspec-h2", own_host.alias)
    done = ns_control("run", "--no-merge", str(experiment(text)), cwd=tmp_path, timeout=60)
    assert done.returncode == 1
    assert "could not reach host b (connecting):" in done.stderr, done.stderr
    assert f"ssh to root@{own_host.address}:22: Connection refused" in done.stderr
    assert "connection lost" not in done.stderr


def test_a_wrong_key_is_refused_naming_host_and_key(ssh_env, experiment, tmp_path):
    wrong = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    config = tmp_path / "ssh_config"
    config.write_text(f"Host wrong\n  HostName {ssh_env[0].address}\n  User root\n  IdentityFile {wrong}\n"
                      f"  UserKnownHostsFile {ssh_env[0].state / 'known_hosts'}\n")
    env = {**os.environ, "NETSPEC_SSH_CONFIG": str(config)}
    path = experiment("experiment: k\nhosts: {a: {ssh: wrong}}\n"
                      "components: {x: {host: a, command: 'true'}}\nschedule: [launch]\n")
    done = subprocess.run([sys.executable, "-m", "netspec.controller.cli", "up", str(path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"a: FAILED: could not reach host a (connecting): authentication failed for " \
           f"root@{ssh_env[0].address}:22 (keys tried: {wrong}" in done.stdout, done.stdout


def test_an_unknown_host_key_is_refused_unless_accept_new_is_asked(ssh_env, experiment, tmp_path):
    """Through ~/.ssh/config (an alias) and the default ~/.ssh/known_hosts, empty at first."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host box\n  HostName {ssh_env[1].address}\n  User root\n"
        f"  IdentityFile {ssh_env[0].state / 'id_ed25519'}\n")
    env = {k: v for k, v in os.environ.items() if k != "NETSPEC_SSH_CONFIG"} | {"HOME": str(home)}
    path = experiment(ACROSS.replace("netspec-h1", "box").replace("netspec-h2", "box"))

    def run(*flags):
        return subprocess.run([sys.executable, "-m", "netspec.controller.cli", "run", *flags, str(path)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    refused = run()
    assert refused.returncode == 1
    assert f"host key of {ssh_env[1].address} is unknown" in refused.stderr
    assert "--accept-new-host-keys" in refused.stderr
    accepted = run("--accept-new-host-keys")
    assert accepted.returncode == 0, accepted.stderr
    known = (home / ".ssh" / "known_hosts").read_text()
    assert known.startswith(f"{ssh_env[1].address} ssh-ed25519 ")
    assert run().returncode == 0  # known now


def test_a_host_lost_mid_run_stops_the_run_and_keeps_the_others_data(ssh_env, own_host, experiment, tmp_path):
    text = textwrap.dedent(f"""\
        experiment: lost
        hosts: {{a: {{ssh: netspec-h1}}, b: {{ssh: {own_host.alias}}}}}
        components:
          one: {{host: a, program: ACTOR, args: ["launch,work,collect"], params: {{lines: 3}}}}
          two: {{host: b, program: ACTOR, args: ["launch,work,collect"], params: {{hang_in: work}}}}
        schedule: [launch, {{phase: work, deadline: 5m}}, collect]
        """)
    proc = subprocess.Popen([sys.executable, "-m", "netspec.controller.cli", "run", str(experiment(text))],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def working():
        latest = tmp_path / "runs" / "latest" / "run.json"
        record = json.loads(latest.read_text()) if latest.exists() else {}
        steps = record.get("steps") or [{}]
        return steps[-1].get("phase") == "work" and steps[-1]["hosts"].get("a", {}).get("components")

    wait_for(working, timeout=120, what="host a to finish phase 'work'")
    own_host.kill_everything()
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert "host b: connection lost" in stderr
    run = tmp_path / "runs" / "latest"
    assert "one line 2" in (run / "hosts" / "a" / "one" / "stdout").read_text()
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "failed"
    # Host b is gone whole, its sshd too: that nothing could be salvaged is said.
    assert "salvage failed: " in record["hosts"]["b"]["salvaged"]["error"]
    assert netns_pids(ssh_env[0]) == {ssh_env[0].sshd_pid()}


def test_a_daemon_killed_on_an_ssh_host_is_salvaged_over_sftp(ssh_env, experiment, tmp_path):
    text = textwrap.dedent("""\
        experiment: salvage
        hosts: {a: {ssh: netspec-h1}, b: {ssh: netspec-h2}}
        components:
          one: {host: a, program: ACTOR, args: ["prepare,work"], params: {ticks: 1000, hang_in: work}}
          two: {host: b, program: ACTOR, args: ["prepare,work"]}
        streams: {play: {enable: [PLAY]}}
        schedule: [launch, start_logging, prepare, {phase: work, deadline: 5m}, collect]
        """)
    proc = subprocess.Popen([sys.executable, "-m", "netspec.controller.cli", "run", str(experiment(text))],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def working():
        latest = tmp_path / "runs" / "latest" / "run.json"
        record = json.loads(latest.read_text()) if latest.exists() else {}
        return (record.get("steps") or [{}])[-1].get("phase") == "work" and record

    record = wait_for(working, timeout=120, what="the run to reach phase 'work'")

    def flushed() -> int:
        # The live file on host a (its home is on this machine), read as the merge would.
        found = ssh_env[0].home.glob(f".local/share/netspec/work/*/{record['id']}/streams/play.one.*.ds")
        return sum(r.entity.name == "tick" for path in found for r in StreamReader(path)) == 2000
    wait_for(flushed, timeout=60, what="component one's ticks to be flushed on host a")
    os.kill(record["hosts"]["a"]["daemon_pid"], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr
    assert "host a: connection lost" in stderr
    salvaged = latest_record(tmp_path / "runs")["hosts"]["a"]["salvaged"]
    assert salvaged["via"].startswith("SFTP to root@") and salvaged["removed"], salvaged
    assert f"[salvaged host a: {len(salvaged['files'])} files" in stdout
    streams = [f for f in salvaged["files"] if f.startswith("hosts/a/streams/play.one.")]
    ticks = sum(r.entity.name == "tick" for r in StreamReader(tmp_path / "runs" / "latest" / streams[0]))
    assert ticks == 2000  # every record flushed before the kill is in the run directory
    assert not Path(salvaged["from"]).exists()  # the hosts' home is on this machine: nothing left there
    again = ns_control("collect", cwd=tmp_path)  # over SSH again, without daemons: nothing left, said
    assert again.returncode == 0, again.stdout + again.stderr
    assert "host a: 0 files" in again.stdout and "host b: 0 files" in again.stdout


def test_up_and_keep_daemons_leave_daemons_that_runs_reuse_and_down_stops_them(ssh_env, experiment, key,
                                                                              tmp_path):
    path = experiment(ACROSS)
    # A daemon kept on a host holds a key the user placed there: without one, `up` says how.
    refused = ns_control("up", str(path), cwd=tmp_path, timeout=120)
    assert refused.returncode == 1
    said = "no key for a daemon kept there: place this controller's key as netspecd's there, e.g. `ssh "
    assert "a: FAILED: could not reach host a (connecting): " in refused.stdout, refused.stdout
    assert said in refused.stdout, refused.stdout
    placed = place_key(ssh_env[0].home, key)  # the hosts share this home
    try:
        up = ns_control("up", str(path), cwd=tmp_path, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        assert up.stdout.splitlines()[0].startswith("a: netspecd started (port ")
        daemons = netns_pids(ssh_env[0]) - {ssh_env[0].sshd_pid()}
        assert len(daemons) == 1
        assert ns_control("up", str(path), cwd=tmp_path).stdout.startswith("a: netspecd already running")
        done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert netns_pids(ssh_env[0]) - {ssh_env[0].sshd_pid()} == daemons  # the same daemon served it
        down = ns_control("down", str(path), cwd=tmp_path)
        assert down.stdout.splitlines() == ["a: netspecd stopped", "b: netspecd stopped"]
        wait_for(lambda: netns_pids(ssh_env[0]) == {ssh_env[0].sshd_pid()}, what="the daemon to end")
        kept = ns_control("run", "--no-merge", "--keep-daemons", str(path), cwd=tmp_path)
        assert kept.returncode == 0, kept.stderr
        assert len(netns_pids(ssh_env[0]) - {ssh_env[0].sshd_pid()}) == 1  # still there
        assert ns_control("down", str(path), cwd=tmp_path).stdout.startswith("a: netspecd stopped")
    finally:
        placed.unlink()


def place_key(home: Path, key: bytes) -> Path:
    """The controller's key placed as netspecd's in `home` (~/.config/netspec/key, 0600), as
    the user of a kept daemon places it."""
    placed = home / ".config" / "netspec" / "key"
    placed.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(placed, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, (key.hex() + "\n").encode())
    os.close(fd)
    return placed


def test_an_ssh_host_of_one_run_is_given_a_key_of_that_run_alone_and_keeps_no_key(ssh_env, experiment, key,
                                                                                   tmp_path):
    old = ssh_env[0].home / ".local" / "share" / "netspec" / "keys"
    old.mkdir(parents=True, exist_ok=True, mode=0o700)
    (old / "0123456789abcdef").write_text("00" * 32 + "\n")  # a copy an older netspec stored
    done = ns_control("run", "--no-merge", str(experiment(ACROSS)), cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    # The copy is gone, said; nothing in the hosts' home holds the long-term key, nor the run's.
    said = f"removed 1 copies of the controller's long-term key that an older netspec left in " \
           f"{ssh_env[0].home}/.local/share/netspec/keys"
    assert said in done.stdout, done.stdout
    assert any(said in text for text in latest_record(tmp_path / "runs")["leftovers"])
    assert not old.exists()
    found = subprocess.run(["grep", "-rl", key.hex(), str(ssh_env[0].home)], capture_output=True, text=True)
    assert found.stdout == "", found.stdout


def test_a_program_the_host_cannot_see_is_copied_there(ssh_env, experiment, tmp_path):
    """The controller runs in a mount namespace of its own, with the program on a tmpfs
    that the hosts' processes cannot see."""
    private = tmp_path / "private"
    private.mkdir()
    text = ACROSS.replace(str(STIMULUS), str(private / "stimulus.py"))
    path = experiment(text)
    script = (f"mount -t tmpfs none {private} && cp {STIMULUS} {private}/ && "
              f"exec {sys.executable} -m netspec.controller.cli run {path}")
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (private / "stimulus.py").exists()  # not in this test's mount namespace
    argv = json.loads((tmp_path / "runs" / "latest" / "hosts" / "a" / "server" / "exit.json")
                      .read_text())["argv"]
    assert "/.local/share/netspec/programs/" in argv[1] and argv[1].endswith("/stimulus.py")


def test_a_key_held_by_the_ssh_agent_is_used(ssh_env, experiment, tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host agented\n  HostName {ssh_env[0].address}\n  User root\n"
        f"  UserKnownHostsFile {ssh_env[0].state / 'known_hosts'}\n")
    agent = subprocess.run(["ssh-agent", "-s"], capture_output=True, text=True, check=True).stdout
    env = dict(re.findall(r"(SSH_AUTH_SOCK|SSH_AGENT_PID)=([^;]+);", agent))
    env = {k: v for k, v in os.environ.items() if k != "NETSPEC_SSH_CONFIG"} | env | {"HOME": str(home)}
    try:
        subprocess.run(["ssh-add", "-q", str(ssh_env[0].state / "id_ed25519")], env=env, check=True,
                       capture_output=True)
        path = experiment("experiment: agent\nhosts: {a: {ssh: agented}}\n"
                          "components: {x: {host: a, command: 'true'}}\nschedule: [launch]\n")
        done = subprocess.run([sys.executable, "-m", "netspec.controller.cli", "run", str(path)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    finally:
        os.kill(int(env["SSH_AGENT_PID"]), signal.SIGTERM)
