"""A run's link conditions on this host: the conditions in effect toward each peer, the
backend placed for each part of them (by what this host offers), installed, changed and
removed. The daemon's run owns one (daemon/services.py) and closes it whatever ends the run;
the audit reads its counters (`stats`), the fault schedule applies a partition through it."""

from __future__ import annotations

import ipaddress
import threading
import time
from dataclasses import dataclass, field

import msgspec
from netspec.protocol.links import Backends, LinkCondition, LinkOffer, LinkRule, LinkStats, PeerStats
from netspec.protocol.names import NAME
from netspec.protocol.packets import HeldPackets

from . import kernel, libnft, names
from .kernel import Exclude, Peer
from .names import ToolFailed
from .nfqueue import QueueError, UserPath
from .probe import offer

__all__ = ["Applied", "Exclude", "LinkSet", "Refused", "place"]


class Refused(Exception):
    """Conditions this host cannot apply: each (peer, part, what is missing), all at once."""

    def __init__(self, host: str, missing: list[tuple[str, str, str]]):
        self.host, self.missing = host, missing
        said = "; ".join(f"link {host} -> {peer}: {part} needs {what}" for peer, part, what in missing)
        super().__init__(f"host {host} cannot apply: {said}")


@dataclass
class Applied:
    """Conditions put in effect, and which backend applies each part, by peer. When: the
    change took effect inside a window on this host's clock (ns), from just before its first
    part was submitted to the kernel (`began_ns`) to just after its last returned
    (`applied_ns`); what is worked out first (routes, the rules' text, the queue's binding)
    is outside it. Its instant is the window's midpoint (`at_ns`), within `half_ns`."""

    began_ns: int
    applied_ns: int
    placements: dict[str, Backends] = field(default_factory=dict)

    @property
    def at_ns(self) -> int:
        return (self.began_ns + self.applied_ns) // 2

    @property
    def half_ns(self) -> int:
        return (self.applied_ns - self.began_ns + 1) // 2


def place(condition: LinkCondition, have: LinkOffer) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Which backend applies each part of `condition` on a host that offers `have`: (part ->
    backend, [(part, what is missing)]). The kernel first (netem with htb for all but a
    partition; else htb for a rate, nftables for a partition); netspec's user-space path for
    the rest (delay, jitter, loss, and a partition without nftables), nftables for an
    independent loss where there is no user-space path. A loss goes to the user-space path
    before nftables because a drop at the sender's egress is the sender's own: its TCP is told
    (NET_XMIT_DROP), counts no loss and sends the segment again at once, where a link's loss
    goes unseen until the peer's acks say it (measured: bulk TCP at 5 % loss kept 2.2 Gbit/s).
    iptables' own drops are not used: at the output hook a drop fails the sender's call, which
    no link does."""
    parts: dict[str, str] = {}
    missing: list[tuple[str, str]] = []
    user = have.iptables and have.nfqueue
    for part in condition.needs():
        if not have.cap_net_admin:
            missing.append((part, "CAP_NET_ADMIN (netspecd runs without it)"))
        elif part == "partition" and have.nftables:
            parts[part] = "nftables"
        elif part == "rate":
            if have.htb:
                parts[part] = "htb"
            else:
                missing.append((part, "the htb qdisc (sch_htb) and tc"))
        elif have.netem and have.htb:
            parts[part] = "netem"
        elif user:
            parts[part] = "user"
        elif part == "loss" and have.nftables:
            parts[part] = "nftables"
        else:
            kernel_way = "nftables" if part in ("partition", "loss") else "netem (sch_netem, with htb)"
            missing.append((part, f"{kernel_way}, or iptables with the NFQUEUE target (netspec's "
                                  "user-space path)"))
    return parts, missing


def _on_user(condition: LinkCondition, parts: dict[str, str]) -> LinkCondition | None:
    """The parts of `condition` placed on the user-space path (None: none)."""
    mine = {part for part, backend in parts.items() if backend == "user"}
    if not mine:
        return None
    if "partition" in mine:
        return LinkCondition(loss_pct=100.0)
    lossy = {"loss", "bursty loss"} & mine
    return LinkCondition(delay_ms=condition.delay_ms if "delay" in mine else 0.0,
                         path=condition.path and "delay" in mine,
                         jitter_ms=condition.jitter_ms if "jitter" in mine else 0.0,
                         distribution=condition.distribution,
                         loss_pct=condition.loss_pct if lossy else 0.0,
                         loss_burst=condition.loss_burst if lossy else None)


class LinkSet:
    """The run's conditions on this host, one direction each: from here to a peer.

    Lifecycle: made for a run (nothing installed); `apply` any number of times (each call
    changes the peers it names, the rest hold); `close` once, which removes every rule,
    chain, qdisc and queue of the run, even if a part fails (the failures are returned).
    Thread-safe: the daemon applies from its loop's worker threads, a fault timer from its own.
    """

    def __init__(self, run_id: str, host: str = "", exclude: Exclude | None = None,
                 have: LinkOffer | None = None):
        self.run_id, self.host, self.exclude = run_id, host, exclude or Exclude()
        self.have = have if have is not None else offer()
        self.rules: dict[str, LinkRule] = {}
        self.placed: dict[str, dict[str, str]] = {}
        self.cuts: dict[str, tuple[str, dict[str, str]]] = {}  # partitioned on top: address, placement
        self._cut_drops: dict[str, int] = {}  # a cut peer's user-space drops before its cut
        self.watched: dict[str, str] = {}  # healed peers (-> address) whose first packet through is counted
        self._devices: dict[str, str] = {}  # peer -> its device, for those with an htb class
        self._routes: dict[str, str] = {}  # address -> the device toward it, as first looked up
        self._shaped: set[str] = set()  # devices with the run's htb tree
        self._batches: dict[str, str] = {}  # each one's tree as installed
        self._queued: list[str] = []  # the iptables chain's rules as installed
        self._nft = self._iptables = False
        self._user: UserPath | None = None
        self._held: HeldPackets | None = None  # where the user-space path writes what it holds
        self._lock = threading.Lock()
        self.closed = False

    def place(self, rules: list[LinkRule]) -> dict[str, Backends]:
        """Each rule's placement on this host (a peer named by several rules: the parts of all).

        Raises:
            Refused: a part of a condition no backend here can apply (every one, at once), or
                a peer at this host's own address.
        """
        placed, missing = {}, []
        for rule in rules:
            if not NAME.fullmatch(rule.peer):  # it goes into the backends' scripts
                raise Refused(self.host, [(repr(rule.peer), "its name",
                                           "a safe name (letters, digits, _ . -)")])
            parts, lacking = place(rule.condition, self.have)
            missing += [(rule.peer, part, what) for part, what in lacking]
            try:
                address = ipaddress.ip_address(rule.address)
            except ValueError:
                missing.append((rule.peer, ", ".join(parts) or "its condition",
                                f"an IP address (the peer is at {rule.address!r})"))
            else:
                if address.version != 4 and set(parts.values()) - {"nftables"}:
                    missing.append((rule.peer, ", ".join(parts),
                                    f"an IPv4 address (the peer is at {rule.address})"))
            # A peer named twice (a check of every condition a run will ask): every part said.
            known = placed[rule.peer].parts if rule.peer in placed else {}
            placed[rule.peer] = Backends(parts={**known, **parts})  # type: ignore[arg-type]
        if missing:
            raise Refused(self.host, missing)
        return placed

    def prepare(self, rules: list[LinkRule]) -> None:
        """Look up now the device toward each rule's peer (`ip route get`, a process: 3-4 ms),
        which a change at an instant (a fault's partition) would otherwise spend first. A peer
        with no route is left for the change to say so. nftables' library is loaded too."""
        libnft.load()
        for rule in rules:
            try:
                self._device(rule.address)
            except ToolFailed:
                continue

    def _device(self, address: str) -> str:
        if address not in self._routes:
            self._routes[address] = kernel.device_to(address)
        return self._routes[address]

    def apply(self, rules: list[LinkRule]) -> Applied:
        """Put `rules` in effect (each replaces its peer's condition; an empty one clears it).

        Raises:
            Refused: as `place`; nothing changed.
            ToolFailed, QueueError: a tool or the queue refused; what was applied before
                stays until `close`.
        """
        placed = self.place(rules)
        with self._lock:
            if self.closed:
                raise ToolFailed(f"run {self.run_id}: its link conditions were removed (the run ended)")
            for rule in rules:
                if rule.condition.empty:
                    self.rules.pop(rule.peer, None)
                    self.placed.pop(rule.peer, None)
                else:
                    self.rules[rule.peer], self.placed[rule.peer] = rule, dict(placed[rule.peer].parts)
            began, applied = self._install({r.peer: r.address for r in rules})
            return Applied(began, applied, placed)

    def cut(self, peers: dict[str, str], on: bool = True) -> Applied:
        """A partition toward each of `peers` (name -> address) on top of its condition (`on`),
        or healed (not `on`): its condition as it was, or as a change since made it. For a
        fault's partition and heal at an instant (its `applied_ns`).

        Raises:
            Refused: no backend here can partition; nothing changed.
            ToolFailed, QueueError: as `apply`.
        """
        cut = LinkCondition(partition=on)  # a heal's: its peers' names and addresses checked alone
        self.place([LinkRule(peer=peer, address=address, condition=cut) for peer, address in peers.items()])
        parts = place(LinkCondition(partition=True), self.have)[0]
        with self._lock:
            if self.closed:
                raise ToolFailed(f"run {self.run_id}: its link conditions were removed (the run ended)")
            for peer, address in peers.items():
                self.watched.pop(peer, None)
                if on:
                    self.cuts[peer] = (address, parts)
                    counts = self._user.counters(address) if self._user is not None else None
                    self._cut_drops[peer] = counts.dropped if counts is not None else 0
                else:
                    self.cuts.pop(peer, None)
                    self._cut_drops.pop(peer, None)
                    if self.have.nftables:  # its first packet through counted (`through`)
                        self.watched[peer] = address
            began, applied = self._install(dict(peers))
            return Applied(began, applied, {p: Backends(parts=parts) for p in peers})  # type: ignore[arg-type]

    def _peers(self) -> list[Peer]:
        """Every conditioned direction as it is in effect: a cut one partitioned, its other
        parts left as they are (so a cut and a heal change the partition's rule alone)."""
        cut = LinkCondition(partition=True)
        peers = []
        for r in self.rules.values():
            if r.peer in self.cuts:
                parts = {**self.placed[r.peer], **self.cuts[r.peer][1]}
                condition = msgspec.structs.replace(r.condition, partition=True)
                peers.append(Peer(r.peer, r.address, condition, parts))
            else:
                peers.append(Peer(r.peer, r.address, r.condition, self.placed[r.peer]))
        return peers + [Peer(name, address, cut, parts) for name, (address, parts) in self.cuts.items()
                        if name not in self.rules]

    def _install(self, changed: dict[str, str]) -> tuple[int, int]:
        """Install what is in effect; `changed`: the peers changed (name -> address). The
        window the change took effect in (this host's clock, ns): everything that can be is
        worked out before it (the queue bound, each peer's device, each tool's input), so
        that it holds the submissions alone; a change the nftables rules make alone (a
        partition, a loss, a cut, a heal) is one `nft -f -` transaction, one process."""
        peers = self._peers()
        # The user-space path first: its queue is bound before any rule sends packets to it.
        if self._user is None and any("user" in p.parts.values() for p in peers):
            self._user = UserPath(names.queue(self.run_id), names.mark(self.run_id))
            self._user.held = self._held
        devices = {p.name: self._devices.get(p.name) or self._device(p.address) for p in peers}
        watched = {**devices, **{name: self._device(address) for name, address in self.watched.items()}}
        script = kernel.nft_script(self.run_id, peers, watched, self.exclude, self._nft, self.watched)
        queue = names.queue(self.run_id)
        queued = kernel.iptables_rules(self.run_id, peers, self.exclude, queue, names.mark(self.run_id))
        shaped = [p for p in peers if {"htb", "netem"} & set(p.parts.values())]
        shaped_on = {p.name: devices[p.name] for p in shaped}
        touched = {shaped_on[name] for name in changed if name in shaped_on}
        was = {name: self._devices[name] for name in changed if name in self._devices}
        touched |= {device for device in was.values() if device in self._shaped}
        trees = {}
        for device in sorted(touched):
            on = [p for p in shaped if devices[p.name] == device]
            batch = kernel.tc_batch(self.run_id, device, on, self.exclude, False)
            if not (device in self._shaped and self._batches.get(device) == batch):
                trees[device] = (on, batch)  # else its tree as it is: a cut or a heal keeps the rate
        effective = {p.name: p for p in peers}
        began = time.time_ns()
        if self._user is not None:
            for name, address in changed.items():
                peer = effective.get(name)
                self._user.set(address, None if peer is None else _on_user(peer.condition, peer.parts))
        if script:
            kernel.nft_run(script)
        self._nft = kernel.nft_needed(peers) or bool(self.watched)
        if queued != self._queued or not self._iptables:  # unchanged: not installed again
            self._iptables = kernel.iptables_apply(self.run_id, queued, self._iptables)
            self._queued = queued
        self._devices = devices
        for device, (on, batch) in trees.items():
            if kernel.tc_apply(self.run_id, device, on, self.exclude, device in self._shaped):
                self._shaped.add(device)
                self._batches[device] = batch
            else:
                self._shaped.discard(device)
                self._batches.pop(device, None)
        return began, time.time_ns()

    def partitioned(self, peer: str) -> int:
        """Packets toward `peer` its cut has dropped so far (0: not cut): the nftables rule's
        counter (its table is made anew at each change), or the user-space path's drops since
        the cut. A fault's look for its effect: no qdisc's statistics read."""
        with self._lock:
            cut, user, before = self.cuts.get(peer), self._user, self._cut_drops.get(peer, 0)
        if cut is None:
            return 0
        address, parts = cut
        if parts.get("partition") == "user":
            counts = user.counters(address) if user is not None else None
            return 0 if counts is None else max(0, counts.dropped - before)
        return kernel.nft_counts(self.run_id).get(peer, 0)

    def through(self, peer: str) -> int:
        """Packets toward healed `peer` that went out since its heal (0: none yet, or not
        watched: no nftables here), by the counting rule after its drops."""
        with self._lock:
            if peer not in self.watched:
                return 0
        return kernel.nft_counts(self.run_id).get(kernel.through(peer), 0)

    def unwatch(self, peer: str) -> None:
        """Stop counting healed `peer`'s packets (its first one through was seen, or looked
        for long enough)."""
        with self._lock:
            if self.closed or self.watched.pop(peer, None) is None:
                return
            self._install({})

    def stats(self) -> LinkStats:
        """The backends' counters now, per peer conditioned (the user-space path's, the nftables
        rules' drops: `partitioned` while the peer is cut off, and the htb class's)."""
        with self._lock:
            peers = self._peers()
            devices, shaped_devices, user = dict(self._devices), set(self._shaped), self._user
            table = self._nft
        dropped = kernel.nft_counts(self.run_id) if table else {}  # no table: no `nft` to ask
        classes = {d: kernel.tc_counts(self.run_id, d) for d in set(devices.values()) & shaped_devices}
        shaped = [p for p in peers if {"htb", "netem"} & set(p.parts.values())]
        found = LinkStats(read_ns=time.time_ns(), queue_overruns=user.overruns if user else 0,
                          realtime=user.realtime if user else None)
        for peer in peers:
            stats = PeerStats()
            if user is not None and (counts := user.counters(peer.address)) is not None:
                stats.queued, stats.released = counts.queued, counts.released
                stats.dropped_user = counts.dropped
                stats.late_total_ns, stats.late_max_ns = counts.late_total_ns, counts.late_max_ns
                stats.late_over_1ms = counts.late_over_1ms
            if peer.condition.partition:  # by its nftables rule, or on the user-space path
                stats.partitioned = dropped.get(peer.name, 0) + (
                    stats.dropped_user if peer.parts.get("partition") == "user" else 0)
            else:
                stats.dropped_kernel = dropped.get(peer.name, 0)
            device = devices.get(peer.name)
            if device in classes:  # its class's minor: its place among the device's (kernel.tc_batch)
                on = [p.name for p in shaped if devices.get(p.name) == device]
                got = classes[device].get(on.index(peer.name) + 1, {}) if peer.name in on else {}
                stats.rate_bytes, stats.rate_packets = got.get("bytes", 0), got.get("packets", 0)
                stats.rate_dropped, stats.rate_overlimits = got.get("drops", 0), got.get("overlimits", 0)
            found.peers[peer.name] = stats
        return found

    def hold_into(self, held: HeldPackets | None) -> None:
        """Write each packet the user-space path holds or drops into `held` from now on (None:
        no more): the packets: service's view of where the emulated link begins."""
        with self._lock:
            self._held = held
            if self._user is not None:
                self._user.held = held

    def close(self) -> list[str]:
        """Remove every rule, chain, qdisc and queue of the run here; each failure said, in
        the list returned (the others are removed all the same). Idempotent."""
        with self._lock:
            if self.closed:
                return []
            self.closed = True
            failed = []
            for remove in (self._remove_rules, self._remove_qdiscs, self._remove_queue):
                try:
                    remove()
                except (ToolFailed, QueueError, OSError) as exc:
                    failed.append(str(exc))
            self.rules.clear()
            return failed

    def _remove_rules(self) -> None:
        if self._iptables:  # first: no packet is queued to a path about to go
            kernel.iptables_remove(self.run_id)
            self._iptables = False
        if self._nft:
            kernel.nft_apply(self.run_id, [], {}, self.exclude, True)
            self._nft = False

    def _remove_qdiscs(self) -> None:
        for device in sorted(self._shaped):
            kernel.tc_apply(self.run_id, device, [], self.exclude, True)
        self._shaped.clear()

    def _remove_queue(self) -> None:
        if self._user is not None:
            user, self._user = self._user, None
            user.close()
