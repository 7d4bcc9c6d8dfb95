"""Link conditions as they cross packages: one direction's condition (`LinkCondition`), a rule
the controller sends a daemon for one peer (`LinkRule`), what a host's kernel offers
(`LinkOffer`, the daemon's probe), which backend applies each part of a condition
(`Backends`) and what the backends counted (`LinkStats`). The experiment file's `links:`
(controller/experiment/links.py) resolves to LinkConditions per directed pair, recorded in
run.json's plan (protocol/runplan.py); the daemon's netspec.links applies them.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

import msgspec

from .names import NAME

__all__ = ["DISTRIBUTIONS", "Backends", "LinkCondition", "LinkOffer", "LinkRule", "LinkStats", "PeerStats"]

Distribution = Literal["uniform", "normal", "pareto", "paretonormal"]  # as netem names them
DISTRIBUTIONS = get_args(Distribution)
NonNegative = Annotated[float, msgspec.Meta(ge=0)]
Percent = Annotated[float, msgspec.Meta(ge=0, le=100)]


class LinkCondition(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True):
    """What one direction of a link does to the packets on it: a delay (with a jitter drawn
    from `distribution`), a loss (independent, or in bursts of `loss_burst` packets on
    average: Gilbert-Elliott), a rate, or nothing at all (`partition`). All at their
    defaults: no condition."""

    delay_ms: NonNegative = 0.0
    # The delay's path in place even at 0 ms (a `delay:` given): a sweep's 0 point crosses
    # the backend its other points cross, rather than no backend at all.
    path: bool = False
    jitter_ms: NonNegative = 0.0
    distribution: Distribution = "normal"
    loss_pct: Percent = 0.0
    loss_burst: Annotated[float, msgspec.Meta(ge=1)] | None = None
    rate_mbit: Annotated[float, msgspec.Meta(gt=0)] | None = None
    partition: bool = False

    @property
    def empty(self) -> bool:
        return not self.needs()

    def needs(self) -> list[str]:
        """The parts of the condition a backend must apply, each a word the errors use:
        delay, jitter, loss, bursty loss, rate, partition."""
        if self.partition:
            return ["partition"]
        parts = [name for name, on in (("delay", self.delay_ms > 0 or self.path),
                                       ("jitter", self.jitter_ms > 0)) if on]
        if self.loss_pct > 0:
            parts.append("bursty loss" if self.loss_burst is not None else "loss")
        if self.rate_mbit is not None:
            parts.append("rate")
        return parts

    def bursts(self) -> tuple[float, float]:
        """A bursty loss's Gilbert-Elliott chances a packet (netem's `loss gemodel p r 100% 0%`):
        of entering the all-lost bad state, chosen so that the long-run loss is `loss_pct`, and
        of leaving it, 1/`loss_burst` (the burst's mean length)."""
        assert self.loss_burst is not None
        p, leave = self.loss_pct / 100, 1 / self.loss_burst
        return (min(1.0, p * leave / (1 - p)) if p < 1 else 1.0), leave

    def said(self) -> str:
        """In a few words, for people: "delay 10 ms ± 2 ms (normal), loss 1 %, rate 10 Mbit/s"."""
        if self.partition:
            return "partition"
        parts = []
        if self.delay_ms or self.jitter_ms or self.path:
            jitter = f" ± {self.jitter_ms:g} ms ({self.distribution})" if self.jitter_ms else ""
            parts.append(f"delay {self.delay_ms:g} ms{jitter}")
        if self.loss_pct:
            burst = f" in bursts of {self.loss_burst:g}" if self.loss_burst is not None else ""
            parts.append(f"loss {self.loss_pct:g} %{burst}")
        if self.rate_mbit is not None:
            parts.append(f"rate {self.rate_mbit:g} Mbit/s")
        return ", ".join(parts) or "none"


# A peer's name goes into the backends' scripts (a rule's comment): a safe name only (names.NAME).
PeerName = Annotated[str, msgspec.Meta(pattern=rf"^{NAME.pattern}\Z")]


class LinkRule(msgspec.Struct, kw_only=True, frozen=True):
    """The condition of the direction from the daemon's host to `peer` (a host of the run) at
    `address` (the peer's address as this host reaches it). An empty condition clears it."""

    peer: PeerName
    address: str
    condition: LinkCondition = LinkCondition()


class LinkOffer(msgspec.Struct, kw_only=True, omit_defaults=False):
    """What a host's kernel and tools offer link conditions (netspec.links.probe): the qdiscs
    (netem, htb, tbf), nftables with its numgen, iptables with its statistic match and the
    NFQUEUE target, whether the daemon holds CAP_NET_ADMIN, and the path of each binary (None:
    not found). `notes` says what a probe met that is not a plain no (an error's text)."""

    cap_net_admin: bool = False
    netem: bool = False
    htb: bool = False
    tbf: bool = False
    nftables: bool = False
    iptables: bool = False
    statistic: bool = False
    nfqueue: bool = False
    binaries: dict[str, str | None] = {}
    notes: list[str] = []


Backend = Literal["netem", "htb", "nftables", "iptables", "user"]


class Backends(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Which backend applies each part of a condition on one host (LinkCondition.needs'
    words -> a backend: netem, htb, nftables, iptables, or netspec's user-space path `user`)."""

    parts: dict[str, Backend] = {}


class PeerStats(msgspec.Struct, kw_only=True, omit_defaults=False):
    """One direction's counters, from its host's backends: the user-space path's packets,
    drops and lateness (its verdict's instant minus the packet's due instant, ns), the kernel
    rules' drops and the rate class's sent bytes, packets, drops and overlimits."""

    queued: int = 0
    released: int = 0  # the user-space path's copies sent (late_over_1ms is a share of these)
    dropped_user: int = 0
    late_total_ns: int = 0
    late_max_ns: int = 0
    late_over_1ms: int = 0
    dropped_kernel: int = 0
    partitioned: int = 0
    rate_bytes: int = 0
    rate_packets: int = 0
    rate_dropped: int = 0
    rate_overlimits: int = 0


class LinkStats(msgspec.Struct, kw_only=True, omit_defaults=False):
    """A host's link counters (netspec.links.LinkSet.stats): per peer, and when they were read
    (this host's clock)."""

    read_ns: int = 0
    peers: dict[str, PeerStats] = {}
    # Packets the kernel could not hand to the user-space path, or whose verdict it refused.
    queue_overruns: int = 0
    realtime: bool | None = None  # whether the user-space path's thread runs at real-time priority
