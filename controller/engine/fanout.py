"""How a step's enter reaches the fleet, and its acks come back: flat (one enter frame per
host, one ack frame per component) or through a fan-out tree (`fan_out: N`).

In a tree the controller sends one enter to each of its first N hosts, naming every host
of that host's subtree and what each enters; daemons relay it on (daemon/relay.py) and
send the acks up in batches, each ack with its host. The controller's frames per step are
then N each way, whatever the fleet's size. A step every participant must ack is
summarized: the hosts whose acks are all plain come up folded (protocol/acksummary.py),
so that what the controller reads per step does not grow with the fleet either.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass
from typing import Any

from netspec.protocol import acksummary
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.errors import ProtocolError
from netspec.protocol.runrecord import FanOutTree
from netspec.protocol.wire import Packed, packed

from ..hosts.fleet import DaemonClient


@dataclass(frozen=True)
class Tree:
    """A tree over the fleet's hosts, each with at most `width` children: the first `width`
    hosts are the controller's, host i's children are the hosts at width*(i+1) and on."""

    width: int
    hosts: tuple[str, ...]

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        return {h: i for i, h in enumerate(self.hosts)}

    @classmethod
    def over(cls, width: int, hosts: tuple[str, ...], reference: str | None) -> Tree:
        """The tree over `hosts` with the clock `reference` last, so a leaf: it answers every
        host's clock probes, and a relay's work beside that starved its probe server (at 1000
        hosts on 2 cores it answered 20 probes a second, and 972 hosts got no estimate)."""
        return cls(width, (*(h for h in hosts if h != reference), *(h for h in hosts if h == reference)))

    def children(self, host: str) -> tuple[str, ...]:
        start = self.width * (self._index[host] + 1)
        return self.hosts[start:start + self.width]

    @property
    def first(self) -> tuple[str, ...]:
        return self.hosts[:self.width]

    def subtree(self, host: str) -> list[str]:
        """`host` and every host below it, breadth first."""
        found, level = [host], [host]
        while level:
            level = [c for h in level for c in self.children(h)]
            found.extend(level)
        return found

    def top(self) -> dict[str, str]:
        """Every host -> the first-level host whose subtree holds it."""
        return {h: first for first in self.first for h in self.subtree(first)}

    def depth(self) -> int:
        depth, reach = 0, 0
        while reach < len(self.hosts):
            depth += 1
            reach = reach * self.width + self.width
        return depth


class FanOut:
    """The enter frames of a run's steps, and the check of the acks that come back."""

    def __init__(self, clients: dict[str, DaemonClient], tree: Tree | None):
        self.clients, self.tree = clients, tree
        self.top = tree.top() if tree is not None else {}
        self.owed: dict[tuple[int, str], int] = {}  # (step, first-level host) -> acks still to come
        # Each step plan's enters, split by first-level host and encoded, by the plan's identity
        # (participants.StepPlans keeps each for the run): steps alike reuse them, alternating or not.
        self._parts: dict[int, tuple[dict[str, Any], dict[str, tuple[Packed, Packed, int]]]] = {}

    async def connect(self, addresses: dict[str, tuple[str, int]], keys: dict[str, bytes],
                      deadline: float) -> FanOutTree | None:
        """Have every host with children in the tree connect to them (each at the address
        the controller reached it at, with the key it holds for the run if `keys` has one:
        a container's, which a tree has only beside other containers, the loader's rule);
        what run.json says of the tree (None: flat)."""
        tree = self.tree
        if tree is None:
            return None
        parents = [h for h in tree.hosts if tree.children(h)]
        await asyncio.gather(*(self.clients[p].request(m.TREE, deadline, during="connect", children=[
            {"host": c, "address": list(addresses[c]), "hosts": tree.subtree(c),
             **({"key": keys[c]} if c in keys else {})} for c in tree.children(p)])
            for p in parents))
        return FanOutTree(tree.width, tree.depth(), len(parents), list(tree.first))

    def send(self, enters: dict[str, list[dict[str, Any]]], fields: dict[str, Any],
             summarize: bool = False) -> dict[str, int] | int:
        """Send each host its components' enter; when each host's enter left (ns), or in a
        tree when the first level's did. In a tree, `summarize` asks for the plain acks
        folded."""
        if self.tree is None:
            sent = {}
            for host, components in enters.items():
                sent[host] = time.time_ns()
                # One-way: the acks that follow are the answer, one frame per component.
                self.clients[host].notify(m.ENTER, components=components, **fields)
            return sent
        built = self._parts.get(id(enters))
        if built is None or built[0] is not enters:
            built = self._parts[id(enters)] = enters, self._encode(enters)
        sent = time.time_ns()
        for first, (hosts, lists, count) in built[1].items():
            self.owed[(fields["step"], first)] = count
            self.clients[first].notify(m.ENTER, hosts=hosts, lists=lists, **fields,
                                       **({"summarize": True} if summarize else {}))
        return sent

    def _encode(self, enters: dict[str, list[dict[str, Any]]]) -> dict[str, tuple[Packed, Packed, int]]:
        """A step's enter as each first-level host gets it, encoded once per step plan (at
        10,000 hosts, packing it was most of a step's work): its subtree's hosts, each with
        the index of its component list among the subtree's distinct ones (a node step's
        hosts share one), and how many acks the subtree owes."""
        parts: dict[str, tuple[dict[str, int], dict[bytes, int], list[Any]]] = {}
        counts: dict[str, int] = {}
        for host, components in enters.items():
            first = self.top[host]
            hosts, distinct, lists = parts.setdefault(first, ({}, {}, []))
            hosts[host] = index = distinct.setdefault(packed(components), len(distinct))
            if index == len(lists):
                lists.append(components)
            counts[first] = counts.get(first, 0) + len(components)
        return {first: (packed(hosts), packed(lists), counts[first])
                for first, (hosts, _, lists) in parts.items()}

    def batch(self, host: str, event: k.Acks) -> tuple[list[tuple[str, k.Ack]], k.Summary | None]:
        """The (host, ack) pairs of a batch that `host` sent up, and its summary if it has one.

        Raises:
            ProtocolError: the batch is malformed, names a host outside `host`'s subtree or
                has more acks than the step asked of it.
        """
        acks = event.acks  # its shape was checked where it was read (protocol/kinds.py)
        if self.tree is None:
            raise ProtocolError("a batch of acks, but the run has no fan-out tree", f"host {host}")
        foreign = sorted({str(a.host) for a in acks if a.host is None or self.top.get(a.host) != host})
        if foreign:
            raise ProtocolError(f"acks of hosts {foreign[:5]} outside its subtree", f"host {host}")
        summary = event.summary
        wrong = None if summary is None else acksummary.problem(summary, lambda h: self.top.get(h) == host,
                                                                       compressed=True)
        if wrong:
            raise ProtocolError(wrong, f"host {host}")
        key = (event.step, host)
        owed = self.owed.get(key, 0) - len(acks) - (summary.acks if summary else 0)
        if owed < 0:
            raise ProtocolError(f"{-owed} more acks than step {event.step} asked of its subtree",
                                f"host {host}")
        if owed:
            self.owed[key] = owed
        else:  # all in: a long schedule keeps no entry per step (one more ack is still refused)
            self.owed.pop(key, None)
        return [(a.host, a) for a in acks], summary  # type: ignore[misc]

