"""A fault's partition or heal between this host and a peer (daemon/faults.py dispatches it):
the run's link conditions toward the peer (netspec.links, the run's `LinkSet`) cut on top of
what `links:` holds, or the cut lifted. Its effect: the first packet the partition's rule
dropped, from the rule's own counter; a heal's, the first packet out toward the peer after
it (a rule that counts them)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from netspec.protocol import kinds as k
from netspec.protocol.links import LinkRule

COUNT_EVERY_S = 0.002  # how often a partition's counter is read (0.3 ms a read, in this process)


class Partitions:
    """The partitions and heals of one run on this host. Owned by the run's Faults: `apply`
    for each, `close` at its close. The link set is changed and its counters read in one
    thread of its own, so in the order the faults came to it."""

    def __init__(self, link_set: Callable[..., Any], so_far: Callable[[k.FaultDone], None],
                 seen_within_s: float):
        # `link_set`: the run's LinkSet (NodeServices.link_set, made at its first use);
        # `so_far`: a lasting fault's report once done; `seen_within_s`: how long an effect
        # (the first packet dropped, or through) is looked for
        self.link_set, self.so_far, self.seen_within_s = link_set, so_far, seen_within_s
        self.links = ThreadPoolExecutor(max_workers=1, thread_name_prefix="netspecd-fault-links")

    def close(self) -> None:
        self.links.shutdown(wait=False, cancel_futures=True)

    async def apply(self, request: k.Fault, rule: LinkRule, report: k.FaultDone) -> None:
        """The direction from this host to `rule`'s peer partitioned on top of its conditions
        (`LinkSet.cut`), or healed: the partition lifted, the conditions `links:` holds now
        left as they are (a step's change since the partition included). In effect when its
        rules are. A partition's effect is the first packet its rule dropped; a heal's (and a
        timed partition's end's, `through_ns`) the first packet out toward the peer after it:
        each looked for every COUNT_EVERY_S (a read of the rule's counter, in this process)
        for `seen_within_s` at most."""
        links = await self._in_links(self.link_set, request.exclude_tcp, request.exclude_udp)
        peers = {rule.peer: rule.address}
        applied = await self._in_links(links.cut, peers, request.fault == "partition")
        report.done_ns = applied.applied_ns
        report.measured = {"apply_s": (applied.applied_ns - applied.began_ns) / 1e9}
        self.so_far(report)
        if request.fault == "heal":
            report.effect_ns = await self._first(links.through, rule.peer, self.seen_within_s)
            report.effect = f"toward {rule.peer}: partition lifted; " + (
                "a first packet through" if report.effect_ns else
                f"no packet out within {self.seen_within_s:g} s")
            await self._in_links(links.unwatch, rule.peer)
            return
        look = min(self.seen_within_s, request.for_s) if request.for_s is not None else self.seen_within_s
        report.effect_ns = await self._first(links.partitioned, rule.peer, look)
        report.effect = (f"toward {rule.peer}: its rule dropped a first packet" if report.effect_ns
                         else f"toward {rule.peer}: no packet dropped within {look:g} s")
        if request.for_s is not None:
            await asyncio.sleep(max(0.0, report.done_ns / 1e9 + request.for_s - time.time_ns() / 1e9))
            healed = await self._in_links(links.cut, peers, False)
            report.ended_ns = healed.applied_ns
            self.so_far(report)
            report.through_ns = await self._first(links.through, rule.peer, self.seen_within_s)
            await self._in_links(links.unwatch, rule.peer)

    async def _in_links(self, call: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.links, call, *args)

    async def _first(self, count: Any, peer: str, within: float) -> int | None:
        """When `count(peer)` (a rule's packet counter) was first seen above 0, read every
        COUNT_EVERY_S for `within` seconds; None if never."""
        until = time.monotonic() + within
        while time.monotonic() < until:
            if await self._in_links(count, peer):
                return time.time_ns()
            await asyncio.sleep(COUNT_EVERY_S)
        return None
