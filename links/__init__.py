"""netspec.links: link conditions on this host (delay, jitter, loss, rate, partition toward
each peer of a run), applied by the kernel where it can (tc htb, netem, nftables, iptables)
and by netspec's own user-space path (NFQUEUE) where it cannot; the host's probe of what it
offers; the sweep of what a run left behind; the audit's probe traffic (probes.py). The
daemon's run owns a `LinkSet` (daemon/services.py); docs/architecture.md says who calls what.

The API others build on (the audit's probes and bench, the fault schedule's partitions):

    offer()                                 what this host's kernel and tools offer (cached)
    links = LinkSet(run_id, exclude=Exclude(tcp=(22, port), udp=(clock_port,)))
    links.place(rules) -> {peer: Backends} which backend applies each part; raises Refused
    links.apply(rules) -> Applied           the conditions in effect (its instant: applied_ns)
    links.stats() -> LinkStats              the backends' counters (user-space lateness, drops,
                                            the qdisc's and the rules' counts)
    links.close()                           every rule, qdisc, chain and queue of it removed
    sweep(run_id) -> list[str]              what a killed daemon left of the run, removed by name
"""

from __future__ import annotations

from .linkset import Applied, Exclude, LinkSet, Refused
from .probe import offer
from .sweep import sweep

__all__ = ["Applied", "Exclude", "LinkSet", "Refused", "offer", "sweep"]
