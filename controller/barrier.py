"""The barrier of one step: which acks it waits for, and when it opens or fails (k-of-n)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from netspec.protocol import ackjournal
from netspec.protocol import messages as m

from .model import Step


class Barrier:
    """The acks one step waits for; opens when `need` participants acked without error."""

    def __init__(self, index: int, step: Step, expected: dict[str, list[str]]):
        self.index, self.step = index, step
        self.expected = {(h, c) for h, cs in expected.items() for c in cs}
        self.need = step.need or len(self.expected)
        self.acks: dict[tuple[str, str], dict[str, Any]] = {}
        self.by_host: dict[str, list[tuple[str, dict[str, Any]]]] = {h: [] for h in expected}
        self.remaining = {h: len(cs) for h, cs in expected.items()}
        self.good = self.bad = 0
        self.folded: list[bytes] = []  # the records of the acks that came summarized
        self.counted = 0  # ... and how many
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self.opened_ns = 0  # when it opened, on the controller's clock
        # Every expected ack is in (with k of n, after the barrier opened).
        self.complete: asyncio.Future[None] = loop.create_future()
        if not self.expected:
            self.opened.set_result(None)
            self.complete.set_result(None)

    def add(self, host: str, component: str, ack: dict[str, Any]) -> bool:
        """Record an ack; returns False if this error ack makes the step fail."""
        if (host, component) not in self.expected or (host, component) in self.acks:
            return True
        self.acks[(host, component)] = ack
        self.by_host[host].append((component, ack))
        self.remaining[host] -= 1
        if ack["status"] == m.ACK_ERROR:
            self.bad += 1
        else:
            self.good += 1
        if self.bad > len(self.expected) - self.need:
            return False
        self._settle()
        return True

    def add_folded(self, count: int, records: bytes) -> None:
        """`count` acks, each ok, summarized by a fan-out tree (fanout.py checked that no
        subtree sent more than it owed): counted, their records read only if the step fails."""
        self.good += count
        self.counted += count
        self.folded.append(records)
        self._settle()

    def _settle(self) -> None:
        """Open the barrier once `need` acked ok; complete it once every expected one acked."""
        if self.good >= self.need and not self.opened.done():
            self.opened.set_result(None)
            self.opened_ns = time.time_ns()
        if len(self.acks) + self.counted == len(self.expected) and not self.complete.done():
            self.complete.set_result(None)

    def drop(self, host: str, component: str) -> None:
        """`component` left the run (netspec ended it in an earlier step): no longer waited for."""
        if (host, component) not in self.expected or (host, component) in self.acks:
            return
        self.expected.discard((host, component))
        self.remaining[host] -= 1
        if self.step.need is None:
            self.need = len(self.expected)
        self._settle()

    def give_up(self, host: str, component: str) -> None:
        """`component` on `host` will not ack: counted as acked, so `complete` can be set."""
        self.add(host, component, {"status": m.ACK_ERROR, "given_up": True})

    def host_done(self, host: str) -> bool:
        return self.remaining.get(host) == 0

    def waiting(self) -> dict[str, list[str]]:
        folded = {(h, c) for records in self.folded for h, c, _ in ackjournal.entries(records)}
        late: dict[str, list[str]] = {}
        for h, c in sorted(self.expected - self.acks.keys() - folded):
            late.setdefault(h, []).append(c)
        return late
