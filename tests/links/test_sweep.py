import subprocess
import sys
import textwrap

from support import session_run_id

# A daemon's LinkSet, killed hard (os._exit: nothing of close runs) with its conditions in place.
APPLY_AND_DIE = textwrap.dedent("""\
    import os, sys
    from netspec.links import LinkSet
    from netspec.protocol.links import LinkCondition, LinkRule
    links = LinkSet(sys.argv[1], "a")
    links.apply([LinkRule(peer="b", address="10.250.77.2", condition=LinkCondition(
        delay_ms=5, loss_pct=1, rate_mbit=10)),
                  LinkRule(peer="c", address="10.250.77.3", condition=LinkCondition(partition=True))])
    os._exit(0)
    """)


def test_what_a_killed_daemon_left_is_found_by_the_runs_names_and_removed_by_kill_run(veth_netns):
    netns, run_id = veth_netns.name, session_run_id("sweep")
    _in = veth_netns.run
    _in(sys.executable, "-c", APPLY_AND_DIE, run_id)
    # Left behind: its table, its chain (and OUTPUT's jump to it), its htb tree.
    assert "netspec_" in _in("nft", "list", "tables")
    assert "NETSPEC_" in _in("iptables", "-S", "OUTPUT")
    assert " htb " in _in("tc", "qdisc", "show", "dev", "eth0")
    kill = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-m", "netspec.daemon.main",
                           "--kill-run", run_id], capture_output=True, text=True, timeout=60)
    assert kill.returncode == 0, kill.stderr
    assert "netspecd: removed the run's nftables table netspec_" in kill.stderr
    assert "netspec_" not in _in("nft", "list", "tables")
    assert "NETSPEC_" not in _in("iptables", "-S")
    assert " htb " not in _in("tc", "qdisc", "show")
