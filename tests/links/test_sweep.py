import os
import secrets
import subprocess
import sys
import textwrap

import pytest
from support import session_run_id

# A daemon's LinkSet, killed hard (os._exit: nothing of close runs) with its conditions in place.
APPLY_AND_DIE = textwrap.dedent("""\
    import os, sys
    from netspec.links import LinkSet
    from netspec.protocol.links import LinkCondition, LinkRule
    links = LinkSet(sys.argv[1], "a")
    links.apply([LinkRule(peer="b", address="10.250.77.2", condition=LinkCondition(
        delay_ms=5, loss_pct=1, rate_mbit=10))])
    os._exit(0)
    """)


def _in(netns: str, *argv: str) -> str:
    return subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True,
                          timeout=30, check=True).stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace, qdiscs and rules need root")
def test_what_a_killed_daemon_left_is_found_by_the_runs_names_and_removed_by_kill_run():
    netns, run_id = f"nsl{secrets.token_hex(4)}", session_run_id("sweep")
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        for command in ("ip link add eth0 type veth peer name eth1", "ip addr add 10.250.77.1/24 dev eth0",
                        "ip link set eth0 up", "ip link set eth1 up"):
            _in(netns, *command.split())
        _in(netns, sys.executable, "-c", APPLY_AND_DIE, run_id)
        # Left behind: its table, its chain (and OUTPUT's jump to it), its htb tree.
        assert "netspec_" in _in(netns, "nft", "list", "tables")
        assert "NETSPEC_" in _in(netns, "iptables", "-S", "OUTPUT")
        assert " htb " in _in(netns, "tc", "qdisc", "show", "dev", "eth0")
        kill = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-m", "netspec.daemon.main",
                               "--kill-run", run_id], capture_output=True, text=True, timeout=60)
        assert kill.returncode == 0, kill.stderr
        assert "netspecd: removed the run's nftables table netspec_" in kill.stderr
        assert "netspec_" not in _in(netns, "nft", "list", "tables")
        assert "NETSPEC_" not in _in(netns, "iptables", "-S")
        assert " htb " not in _in(netns, "tc", "qdisc", "show")
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)
