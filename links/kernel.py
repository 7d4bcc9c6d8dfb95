"""The kernel's backends: what a run's conditions become on this host, each installed whole
in one go (an nftables table in one transaction, an iptables chain in one iptables-restore,
a device's htb tree in one `tc -batch`) and read back for its counters.

- nftables, table `netspec_<tag>` (family netdev, a chain at the egress hook of each device
  toward a peer): a partition (drop) and an independent loss (`numgen random mod` drop), per
  peer address;
- iptables (iptables-nft), chain `NETSPEC_<tag>` jumped to first from OUTPUT: the NFQUEUE rule
  that hands a peer's packets to the user-space path (nfqueue.py);
- tc: on the device toward each peer with a rate (or netem), a root htb qdisc whose handle
  is the run's (names.handle): a class per peer at its rate, a u32 filter on the peer's
  address, and netem under the class where the kernel has it.

Every backend lets netspec's own traffic through first: TCP from or to the excluded TCP
ports (SSH, the daemons' control ports) and UDP from or to the excluded UDP ports (clksync's).
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass

from netspec.protocol.links import LinkCondition

from . import names
from .libnft import nft
from .names import ToolFailed, run

NFT_PRIORITY = -10  # before iptables-nft's filter chains (0): a dropped packet is never queued
LOSS_SCALE = 1_000_000  # an nftables loss in parts per million


@dataclass(frozen=True)
class Exclude:
    """netspec's own ports, never conditioned: TCP (SSH's, the daemons') and UDP (clksync's)."""

    tcp: tuple[int, ...] = (22,)
    udp: tuple[int, ...] = ()


@dataclass(frozen=True)
class Peer:
    """One conditioned direction as the kernel's backends see it."""

    name: str
    address: str
    condition: LinkCondition
    parts: dict[str, str]  # LinkCondition.needs' words -> backend


def _ports(ports: tuple[int, ...]) -> str:
    return "{ " + ", ".join(map(str, sorted(set(ports)))) + " }"


def _match(address: str) -> str:
    return f"{'ip6' if ipaddress.ip_address(address).version == 6 else 'ip'} daddr {address}"


def through(peer: str) -> str:
    """The comment of the rule that counts a healed peer's packets through (`nft_counts`' key)."""
    return f"{peer} through"


def nft_script(run_id: str, peers: list[Peer], devices: dict[str, str], exclude: Exclude,
               exists: bool, watched: dict[str, str] | None = None) -> str:
    """The run's table as one nft transaction: made (or emptied) and filled, or deleted when
    no peer needs it. A chain per device, at its egress hook: a packet dropped there is lost
    as on a wire (UDP's send does not fail, TCP retransmits), where a drop at the output hook
    would fail the sender's call (EPERM). `watched`: healed peers (name -> address, their
    devices in `devices`) whose packets a rule after the drops counts, so that the first one
    through after a heal is seen."""
    table = names.table(run_id)
    chains: dict[str, list[str]] = {}
    for peer in peers:
        match, note = _match(peer.address), f'comment "{peer.name}"'
        if peer.parts.get("partition") == "nftables":
            chains.setdefault(devices[peer.name], []).append(f"{match} counter drop {note}")
        elif peer.parts.get("loss") == "nftables":
            below = round(peer.condition.loss_pct / 100 * LOSS_SCALE)
            chains.setdefault(devices[peer.name], []).append(
                f"{match} numgen random mod {LOSS_SCALE} < {below} counter drop {note}")
    for name, address in sorted((watched or {}).items()):
        chains.setdefault(devices[name], []).append(f'{_match(address)} counter comment "{through(name)}"')
    head = f"table netdev {table}\ndelete table netdev {table}\n" if exists else ""
    if not chains:
        return head
    own = [f"tcp dport {_ports(exclude.tcp)} accept", f"tcp sport {_ports(exclude.tcp)} accept"]
    if exclude.udp:
        own += [f"udp dport {_ports(exclude.udp)} accept", f"udp sport {_ports(exclude.udp)} accept"]
    text = [f"{head}table netdev {table} {{"]
    for index, (device, rules) in enumerate(sorted(chains.items())):
        body = "\n".join(f"    {rule}" for rule in own + rules)
        text.append(f'  chain egress{index} {{\n    type filter hook egress device "{device}" priority '
                    f"{NFT_PRIORITY}; policy accept;\n{body}\n  }}")
    return "\n".join(text) + "\n}\n"


def nft_run(script: str) -> None:
    """One nft transaction: all of it in effect at once, or none (in this process: libnft.py)."""
    nft(script)


def nft_needed(peers: list[Peer]) -> bool:
    """Whether the run's table exists once `peers` are installed."""
    return any(p.parts.get("partition") == "nftables" or p.parts.get("loss") == "nftables" for p in peers)


def nft_apply(run_id: str, peers: list[Peer], devices: dict[str, str], exclude: Exclude,
              exists: bool) -> bool:
    """Install the run's table; whether it exists now."""
    script = nft_script(run_id, peers, devices, exclude, exists)
    if script:
        nft_run(script)
    return nft_needed(peers)


def nft_counts(run_id: str) -> dict[str, int]:
    """Packets each peer's rules dropped, by peer name."""
    try:
        listed = json.loads(nft(f"list table netdev {names.table(run_id)}", json=True))
    except (ToolFailed, ValueError):
        return {}
    counts: dict[str, int] = {}
    for item in listed.get("nftables", []):
        rule = item.get("rule")
        if rule and rule.get("comment"):
            for expr in rule.get("expr", []):
                if "counter" in expr:
                    counts[rule["comment"]] = counts.get(rule["comment"], 0) + expr["counter"]["packets"]
    return counts


def iptables_rules(run_id: str, peers: list[Peer], exclude: Exclude, queue: int, mark: int) -> list[str]:
    """The run's chain: the user-space path's own copies (their `mark`) and netspec's own
    ports returned first, then each peer on the user-space path queued to it
    (--queue-bypass: if the queue is gone, packets pass)."""
    chain = names.chain(run_id)
    rules = [f"-A {chain} -m mark --mark {mark:#x} -j RETURN"]
    for port in sorted(set(exclude.tcp)):
        rules += [f"-A {chain} -p tcp --{way} {port} -j RETURN" for way in ("dport", "sport")]
    for port in sorted(set(exclude.udp)):
        rules += [f"-A {chain} -p udp --{way} {port} -j RETURN" for way in ("dport", "sport")]
    for peer in peers:
        if "user" in peer.parts.values():
            rules.append(f"-A {chain} -d {peer.address}/32 -m comment --comment \"{peer.name}\" "
                         f"-j NFQUEUE --queue-num {queue} --queue-bypass")
    return rules


def iptables_apply(run_id: str, rules: list[str], exists: bool) -> bool:
    """Install the run's chain (`iptables_rules`, flushed and filled in one iptables-restore)
    and its jump from OUTPUT; remove both when no peer needs them (no rule queues a peer).
    Whether the chain exists now."""
    chain = names.chain(run_id)
    if not any("--comment" in r for r in rules):
        if exists:
            iptables_remove(run_id)
        return False
    body = "\n".join(rules)
    run(["iptables-restore", "--noflush"], stdin=f"*filter\n:{chain} - [0:0]\n{body}\nCOMMIT\n")
    try:
        run(["iptables", "-C", "OUTPUT", "-j", chain])
    except ToolFailed:
        run(["iptables", "-I", "OUTPUT", "1", "-j", chain])
    return True


def iptables_remove(run_id: str) -> list[str]:
    """Unhook, flush and delete the run's chain; what was removed."""
    chain, removed = names.chain(run_id), []
    for _ in range(16):  # a jump inserted more than once (never, but bounded all the same)
        try:
            run(["iptables", "-D", "OUTPUT", "-j", chain])
        except ToolFailed:
            break
    try:
        run(["iptables", "-F", chain])
        run(["iptables", "-X", chain])
        removed.append(f"iptables chain {chain}")
    except ToolFailed:
        pass
    return removed


def device_to(address: str) -> str:
    """The device this host sends to `address` on.

    Raises:
        ToolFailed: no route, or the address is this host's own (a local daemon's peer).
    """
    routes = json.loads(run(["ip", "-j", "route", "get", address]))
    if not routes or routes[0].get("type") == "local" or routes[0].get("dev") == "lo":
        raise ToolFailed(f"{address} is this host's own address: its packets never leave it")
    return routes[0]["dev"]


def _netem(cond: LinkCondition, parts: dict[str, str]) -> str:
    words = []
    if parts.get("delay") == "netem" or parts.get("jitter") == "netem":
        words.append(f"delay {cond.delay_ms}ms")
        if cond.jitter_ms:
            words.append(f"{cond.jitter_ms}ms distribution {cond.distribution}")
    if parts.get("loss") == "netem":
        words.append(f"loss random {cond.loss_pct}%")
    elif parts.get("bursty loss") == "netem":
        enter, leave = cond.bursts()
        words.append(f"loss gemodel {enter * 100:.6f}% {leave * 100:.6f}% 100% 0%")
    return " ".join(words)


def tc_batch(run_id: str, device: str, peers: list[Peer], exclude: Exclude, exists: bool) -> str:
    """The device's htb tree for the peers reached through it, as one `tc -batch`."""
    major = f"{names.handle(run_id):x}"
    lines = [f"qdisc del dev {device} root"] if exists else []
    if not peers:
        return "\n".join(lines)
    lines.append(f"qdisc add dev {device} root handle {major}: htb")
    for minor, peer in enumerate(peers, start=1):
        cond = peer.condition
        rate = f"{cond.rate_mbit}mbit" if peer.parts.get("rate") == "htb" else "100gbit"
        lines.append(f"class add dev {device} parent {major}: classid {major}:{minor:x} htb "
                     f"rate {rate} ceil {rate}")
        dst = f"match ip dst {peer.address}/32"
        for proto, ports in ((6, exclude.tcp), (17, exclude.udp)):
            for port in sorted(set(ports)):
                for way in ("sport", "dport"):  # straight out, unshaped (htb's direct queue)
                    lines.append(f"filter add dev {device} parent {major}: protocol ip prio 1 u32 {dst} "
                                 f"match ip protocol {proto} 0xff match ip {way} {port} 0xffff "
                                 f"flowid {major}:")
        lines.append(f"filter add dev {device} parent {major}: protocol ip prio 2 u32 {dst} "
                     f"flowid {major}:{minor:x}")
        netem = _netem(cond, peer.parts)
        if netem:
            lines.append(f"qdisc add dev {device} parent {major}:{minor:x} netem {netem}")
    return "\n".join(lines)


def tc_apply(run_id: str, device: str, peers: list[Peer], exclude: Exclude, exists: bool) -> bool:
    """Install (or remove) the device's htb tree; whether it exists now."""
    batch = tc_batch(run_id, device, peers, exclude, exists)
    if batch:
        run(["tc", "-batch", "-"], stdin=batch + "\n")
    return bool(peers)


_CLASS = re.compile(r"^class htb (\S+) .*?\n\s*Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)",
                    re.MULTILINE | re.DOTALL)


def tc_counts(run_id: str, device: str) -> dict[int, dict[str, int]]:
    """Each class's counters on the device, by its minor number (read from tc's text: its
    JSON leaves htb classes' statistics out)."""
    try:
        text = run(["tc", "-s", "class", "show", "dev", device])
    except ToolFailed:
        return {}
    major, found = f"{names.handle(run_id):x}:", {}
    for block in re.split(r"\n(?=class )", text):
        got = _CLASS.match(block)
        if got and got[1].startswith(major) and got[1] != major:
            found[int(got[1][len(major):], 16)] = dict(zip(("bytes", "packets", "drops", "overlimits"),
                                                           map(int, got.groups()[1:]), strict=True))
    return found


def tc_sweep(run_id: str) -> list[str]:
    """Every device's root htb qdisc with the run's handle, deleted; the devices."""
    major, removed = f"{names.handle(run_id):x}:", []
    try:
        qdiscs = json.loads(run(["tc", "-j", "qdisc", "show"]))
    except (ToolFailed, ValueError):
        return removed
    for item in qdiscs:
        if item.get("kind") == "htb" and item.get("handle") == major and item.get("root"):
            try:
                run(["tc", "qdisc", "del", "dev", item["dev"], "root"])
                removed.append(f"htb qdisc {major} on {item['dev']}")
            except ToolFailed:
                pass
    return removed
