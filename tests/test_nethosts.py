"""tests/nethosts.py itself: its hosts reach each other across their bridge where FORWARD
drops (as dockerd sets it), by rules of their own that `down` removes.

The machine's firewall is never touched: the set is built inside a network namespace of
this test's own, whose FORWARD policy is set to DROP with bridged traffic sent through
iptables, as dockerd leaves a machine."""

import subprocess
import sys
from pathlib import Path

import nethosts as nh
import pytest
from support import session_dir

NETHOSTS = Path(nh.__file__)


def test_hosts_reach_each_other_across_their_bridge_where_forward_drops():
    if reason := nh.why_unavailable():
        pytest.skip(reason)
    if not Path("/proc/sys/net/bridge").is_dir() or not nh.shutil.which("iptables"):
        pytest.skip("needs br_netfilter and iptables")
    prefix = nh.random_prefix()
    outer, state = f"{prefix}fw", session_dir() / f"hosts-{prefix}"
    inside = ["nsenter", f"--net=/run/netns/{outer}"]  # this mount namespace: its netns files are seen
    subprocess.run(["ip", "netns", "add", outer], check=True)
    try:
        for argv in (["sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"],
                     ["iptables", "-P", "FORWARD", "DROP"]):
            subprocess.run([*inside, *argv], check=True)
        built = subprocess.run([*inside, sys.executable, str(NETHOSTS), "up", "2", "--prefix", prefix,
                                "--state", str(state)], capture_output=True, text=True, timeout=60)
        assert built.returncode == 0, built.stderr
        address = (state / "ssh_config").read_text().split("HostName ")[2].split()[0]
        # Host 1 to host 2's sshd: across the bridge, through FORWARD.
        crossed = subprocess.run(["ip", "netns", "exec", f"{prefix}h1", sys.executable, "-c",
                                  f"import socket; socket.create_connection(({address!r}, 22), timeout=3)"],
                                 capture_output=True, text=True, timeout=30)
        assert crossed.returncode == 0, crossed.stderr
        rules = subprocess.run([*inside, "iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout
        assert f"-i {prefix}br -m comment --comment netspec-nethosts-{prefix} -j ACCEPT" in rules
        down = [*inside, sys.executable, str(NETHOSTS), "down", "--prefix", prefix, "--state", str(state)]
        subprocess.run(down, check=True, timeout=60)
        left = subprocess.run([*inside, "iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout
        assert f"netspec-nethosts-{prefix}" not in left
    finally:
        subprocess.run([*inside, sys.executable, str(NETHOSTS), "down", "--prefix", prefix, "--state",
                        str(state)], capture_output=True, timeout=60)
        subprocess.run(["ip", "netns", "del", outer], capture_output=True)
