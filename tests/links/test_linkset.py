from netspec.links.linkset import Refused, place
from netspec.protocol.links import LinkCondition, LinkOffer

THIS_KERNEL = LinkOffer(cap_net_admin=True, htb=True, tbf=True, nftables=True, iptables=True, statistic=True,
                        nfqueue=True)  # no netem: what this project's machines offer
WAN = LinkCondition(delay_ms=10, jitter_ms=2, loss_pct=1, rate_mbit=10)


def test_without_netem_the_kernel_takes_rate_and_loss_and_the_user_space_path_the_delay():
    assert place(WAN, THIS_KERNEL) == (
        {"delay": "user", "jitter": "user", "loss": "nftables", "rate": "htb"}, [])
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
