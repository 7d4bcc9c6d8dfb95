from netspec.links import names
from netspec.links.kernel import Exclude, Peer, iptables_rules, nft_script, tc_batch
from netspec.protocol.links import LinkCondition

RUN = "20261126T041300Z-abc123"
OWN = Exclude(tcp=(22, 7420), udp=(40000,))
B = Peer("b", "10.9.0.2", LinkCondition(delay_ms=5, loss_pct=2.5, rate_mbit=10),
         {"delay": "user", "loss": "nftables", "rate": "htb"})
C = Peer("c", "10.9.0.3", LinkCondition(partition=True), {"partition": "nftables"})


def test_the_nftables_table_lets_netspecs_own_ports_through_before_any_peers_drop():
    script = nft_script(RUN, [B, C], {"b": "eth0", "c": "eth1"}, OWN, exists=True)
    table = names.table(RUN)
    assert script.startswith(f"table netdev {table}\ndelete table netdev {table}\ntable netdev {table} {{\n")
    chain = script.split("chain egress0 {\n")[1].split("\n  }")[0]
    assert chain.splitlines() == [
        '    type filter hook egress device "eth0" priority -10; policy accept;',
        "    tcp dport { 22, 7420 } accept", "    tcp sport { 22, 7420 } accept",
        "    udp dport { 40000 } accept", "    udp sport { 40000 } accept",
        '    ip daddr 10.9.0.2 numgen random mod 1000000 < 25000 counter drop comment "b"']
    assert 'egress device "eth1"' in script and 'ip daddr 10.9.0.3 counter drop comment "c"' in script
    assert nft_script(RUN, [], {}, OWN, exists=True) == f"table netdev {table}\ndelete table netdev {table}\n"
    assert nft_script(RUN, [], {}, OWN, exists=False) == ""


def test_only_the_user_space_paths_peers_are_queued_after_its_copies_and_netspecs_own_ports_return():
    chain, queue, mark = names.chain(RUN), names.queue(RUN), names.mark(RUN)
    rules = iptables_rules(RUN, [B, C], OWN, queue, mark)
    assert rules[0] == f"-A {chain} -m mark --mark {mark:#x} -j RETURN"
    assert rules[-1] == (
        f"-A {chain} -d 10.9.0.2/32 -m comment --comment \"b\" -j NFQUEUE --queue-num {queue} --queue-bypass")
    assert len(rules) == 1 + 6 + 1
    assert mark >> 16 == 0x6E73 and not mark & 0xC000  # never kube-proxy's bits


def test_a_peers_rate_is_an_htb_class_its_address_is_filtered_into_and_netspecs_ports_go_direct():
    major = f"{names.handle(RUN):x}"
    batch = tc_batch(RUN, "eth0", [B], OWN, exists=False).splitlines()
    assert batch[0] == f"qdisc add dev eth0 root handle {major}: htb"
    assert batch[1] == f"class add dev eth0 parent {major}: classid {major}:1 htb rate 10mbit ceil 10mbit"
    direct = [line for line in batch if line.endswith(f"flowid {major}:")]
    assert len(direct) == 6 and all("prio 1" in line for line in direct)  # 3 ports, both ways
    assert batch[-1].endswith(f"prio 2 u32 match ip dst 10.9.0.2/32 flowid {major}:1")


def test_a_runs_names_come_from_its_id_alone():
    assert names.table(RUN) == f"netspec_{names.tag(RUN)}" and len(names.tag(RUN)) == 8
    assert 0x100 <= names.handle(RUN) < 0xff00 and 0x1000 <= names.queue(RUN) < 0xfffe
    assert names.tag(RUN) != names.tag(RUN + "x")
