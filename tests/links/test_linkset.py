import json
import os
import shutil
import subprocess
import sys

import msgspec
import pytest
from netspec.links.kernel import Exclude, Peer, iptables_rules
from netspec.links.linkset import LinkSet, Refused, place
from netspec.protocol.links import LinkCondition, LinkOffer, LinkRule
from support import session_run_id

THIS_KERNEL = LinkOffer(cap_net_admin=True, htb=True, tbf=True, nftables=True, iptables=True, statistic=True,
                        nfqueue=True)  # no netem: what this project's machines offer
WAN = LinkCondition(delay_ms=10, jitter_ms=2, loss_pct=1, rate_mbit=10)


def test_without_netem_the_kernel_takes_the_rate_and_the_user_space_path_the_delay_and_the_loss():
    # a loss at the sender's egress (nftables) is a drop TCP is told of: the user-space path's
    assert place(WAN, THIS_KERNEL) == (
        {"delay": "user", "jitter": "user", "loss": "user", "rate": "htb"}, [])
    no_queue = LinkOffer(cap_net_admin=True, htb=True, nftables=True)
    assert place(LinkCondition(loss_pct=1), no_queue) == ({"loss": "nftables"}, [])
    bursty = LinkCondition(loss_pct=5, loss_burst=4)
    assert place(bursty, THIS_KERNEL) == ({"bursty loss": "user"}, [])
    assert place(LinkCondition(partition=True), THIS_KERNEL) == ({"partition": "nftables"}, [])


def test_with_netem_the_kernel_takes_every_part_but_the_partition():
    netem = LinkOffer(cap_net_admin=True, netem=True, htb=True, nftables=True)
    assert place(WAN, netem) == ({"delay": "netem", "jitter": "netem", "loss": "netem", "rate": "htb"}, [])
    assert place(LinkCondition(partition=True), netem) == ({"partition": "nftables"}, [])


def test_what_no_backend_can_apply_is_refused_naming_the_host_link_part_and_what_is_missing():
    bare = LinkOffer(cap_net_admin=True, nftables=True)
    parts, missing = place(WAN, bare)
    assert parts == {"loss": "nftables"}
    either = "netem (sch_netem, with htb), or iptables with the NFQUEUE target (netspec's user-space path)"
    assert missing == [("delay", either), ("jitter", either), ("rate", "the htb qdisc (sch_htb) and tc")]
    error = Refused("h2", [("h1", part, what) for part, what in missing])
    assert str(error).startswith("host h2 cannot apply: link h2 -> h1: delay needs netem (sch_netem, "
                                 "with htb)")
    assert place(WAN, LinkOffer())[1][0] == ("delay", "CAP_NET_ADMIN (netspecd runs without it)")


def test_a_hostile_peer_name_or_address_is_refused_before_any_script_is_written():
    hostile = 'b" -j ACCEPT\nCOMMIT\n*nat'
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(msgspec.json.encode({"peer": hostile, "address": "10.0.0.2"}), type=LinkRule)
    links = LinkSet("run", "h1", have=THIS_KERNEL)  # nothing installed until an apply
    with pytest.raises(Refused, match="a safe name"):
        links.place([LinkRule(peer=hostile, address="10.0.0.2", condition=WAN)])
    # an address that is not one, on every part (the kernel's nftables too), and for a cut
    for condition in (WAN, LinkCondition(loss_pct=1), LinkCondition(partition=True)):
        said = r"link h1 -> b: .* needs an IP address \(the peer is at '10.0.0.2 ; x'\)"
        with pytest.raises(Refused, match=said):
            links.place([LinkRule(peer="b", address="10.0.0.2 ; x", condition=condition)])
    with pytest.raises(Refused, match="needs an IP address"):
        links.cut({"b": "10.0.0.2\nflush ruleset"})
    assert not links.cuts and not links.rules
    # a name that passes is quoted where the tools take a comment
    peer = Peer("b.2", "10.0.0.2", WAN, {"delay": "user"})
    [rule] = [r for r in iptables_rules("run", [peer], Exclude(), 4100, 0x6E730001) if "--comment" in r]
    assert '--comment "b.2" ' in rule


# In the test's namespace: a/b's direction cut on a host with the user-space path alone (no
# nftables), datagrams sent to b until the cut is seen to drop one (2 s at most), then healed.
CUT_ON_USER_PATH = """\
import json, socket, sys, time
from netspec.links.linkset import LinkSet
from netspec.protocol.links import LinkOffer
links = LinkSet(sys.argv[1], "a", have=LinkOffer(cap_net_admin=True, htb=True, iptables=True, nfqueue=True))
said = {}
try:
    placed = links.cut({"b": "10.250.77.2"}).placements["b"].parts
    s, end = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), time.monotonic() + 2
    while not links.partitioned("b") and time.monotonic() < end:
        s.sendto(b"x", ("10.250.77.2", 9))
        time.sleep(0.001)
    seen, stats = links.partitioned("b"), links.stats().peers["b"].partitioned
    links.cut({"b": "10.250.77.2"}, on=False)
    said = {"placed": placed, "seen": seen, "stats": stats, "healed": links.partitioned("b")}
finally:
    print(json.dumps({**said, "left": links.close()}))
"""


def test_a_partition_on_the_user_space_path_alone_is_seen_dropping_by_its_own_counts(veth_netns):
    said = json.loads(veth_netns.run(sys.executable, "-c", CUT_ON_USER_PATH, session_run_id("usercut")))
    assert said["placed"] == {"partition": "user"}
    assert said["seen"] >= 1 and said["stats"] >= said["seen"]
    assert said["healed"] == 0 and said["left"] == []  # its rule, chain and queue removed


def test_a_delay_given_as_zero_keeps_its_path_on_the_user_space_path():
    # a sweep's 0 ms point: the packets still cross the path, counted, and pass at once
    from netspec.links.linkset import _on_user

    zero = LinkCondition(path=True)
    assert place(zero, THIS_KERNEL) == ({"delay": "user"}, [])
    on_path = _on_user(zero, {"delay": "user"})
    assert on_path is not None and not on_path.empty and on_path.delay_ms == 0.0
    assert _on_user(LinkCondition(), {}) is None


def test_a_daemon_without_cap_net_raw_is_offered_no_user_space_path_and_told_why():
    # the path sends its copies through a raw socket: without CAP_NET_RAW a delay is refused
    # at launch by name, not failed when the first packet is due
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux) to drop CAP_NET_RAW")
    said = subprocess.run(["setpriv", "--bounding-set", "-net_raw", sys.executable, "-c",
                           "from netspec.links.probe import offer; import json; o = offer();"
                           "print(json.dumps([o.cap_net_admin, o.nfqueue, o.notes]))"],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    admin, nfqueue, notes = json.loads(said)
    assert admin and not nfqueue, said
    assert any("lacks CAP_NET_RAW" in n for n in notes), notes
