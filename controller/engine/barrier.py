"""The barrier of one step: which acks it waits for, and when it opens or fails (k-of-n)."""

from __future__ import annotations

import asyncio
import time

from netspec.protocol import ackjournal
from netspec.protocol import messages as m
from netspec.protocol.errors import NetspecError
from netspec.protocol.kinds import Ack

from ..experiment.model import Step


class NeedOutOfReach(NetspecError):
    """A k-of-n step's `need` is more than its participants: its barrier could never open."""

    def __init__(self, phase: str, need: int, count: int, left: int = 0):
        self.phase, self.need, self.count = phase, need, count
        gone = f" ({left} left the run earlier)" if left else ""
        super().__init__(f"phase '{phase}' needs {need} participants to ack (need: {need}), but it has "
                         f"only {count}{gone}: it could never get through")


class Barrier:
    """The acks one step waits for; opens when `need` participants acked without error.

    Made in O(1) whatever the fleet: it keeps the step's participants by host as given,
    and its per-host state only for hosts whose acks came one by one.

    Raises:
        NeedOutOfReach: the step needs more acks than it has participants (refused before
        anything is sent: no ack is blamed for it).
    """

    def __init__(self, index: int, step: Step, expected: dict[str, list[str]], count: int | None = None):
        self.index, self.step = index, step
        self.expected = expected  # host -> its participating components (shared: not changed here)
        self.count = sum(map(len, expected.values())) if count is None else count
        self.need = step.need or self.count
        if self.need > self.count:
            raise NeedOutOfReach(step.phase, self.need, self.count)
        self.acks: dict[tuple[str, str], Ack] = {}
        self.by_host: dict[str, list[tuple[str, Ack]]] = {}
        self.dropped: set[tuple[str, str]] = set()
        self.good = self.bad = 0
        self.folded: list[tuple[bytes, bool]] = []  # the records of the acks that came summarized
        self.counted = 0  # ... and how many
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[None] = loop.create_future()
        self.opened_ns = 0  # when it opened, on the controller's clock
        # Every expected ack is in (with k of n, after the barrier opened).
        self.complete: asyncio.Future[None] = loop.create_future()
        if not self.count:
            self.opened.set_result(None)
            self.complete.set_result(None)

    def _expects(self, host: str, component: str) -> bool:
        return (component in self.expected.get(host, ()) and (host, component) not in self.acks
                and (host, component) not in self.dropped)

    def add(self, host: str, component: str, ack: Ack) -> bool:
        """Record an ack; returns False if this error ack makes the step fail (an ok ack
        never does: a need out of reach is refused before, or as the count drops)."""
        if not self._expects(host, component):
            return True
        self.acks[(host, component)] = ack
        self.by_host.setdefault(host, []).append((component, ack))
        if ack.status != m.ACK_ERROR:
            self.good += 1
        else:
            self.bad += 1
            if self.bad > self.count - self.need:
                return False
        self._settle()
        return True

    def add_folded(self, count: int, records: bytes, compressed: bool = False) -> None:
        """`count` acks, each ok, summarized by a fan-out tree (fanout.py checked that no
        subtree sent more than it owed): counted, their records read only if the step fails."""
        self.good += count
        self.counted += count
        self.folded.append((records, compressed))
        self._settle()

    def _settle(self) -> None:
        """Open the barrier once `need` acked ok; complete it once every expected one acked."""
        if self.good >= self.need and not self.opened.done():
            self.opened.set_result(None)
            self.opened_ns = time.time_ns()
        if len(self.acks) + self.counted >= self.count and not self.complete.done():
            self.complete.set_result(None)

    def drop(self, host: str, component: str) -> None:
        """`component` left the run (netspec ended it in an earlier step): no longer waited for."""
        if not self._expects(host, component):
            return
        self.dropped.add((host, component))
        self.count -= 1
        if self.step.need is None:
            self.need = self.count
        elif self.need > self.count and not self.opened.done():
            left = len(self.dropped)
            self.opened.set_exception(NeedOutOfReach(self.step.phase, self.need, self.count, left))
            self.opened.exception()  # the step's wait raises it; nothing else need read it
            return
        self._settle()

    def give_up(self, host: str, component: str) -> None:
        """`component` on `host` will not ack: counted as acked, so `complete` can be set."""
        self.add(host, component, self.stand_in(component))

    def stand_in(self, component: str, why: str = "") -> Ack:
        """The error ack the controller counts for `component`, which will not ack the step
        itself (given up, or dead): it carries no stamp of a host's."""
        return Ack(status=m.ACK_ERROR, step=self.index, component=component, entered=0, acked=0, message=why)

    def host_done(self, host: str) -> bool:
        """Whether every participant of `host` acked one by one (or left the run)."""
        left = sum((host, c) in self.dropped for c in self.expected.get(host, ()))
        return len(self.by_host.get(host, ())) + left == len(self.expected.get(host, ()))

    def waiting(self) -> dict[str, list[str]]:
        """Who has not acked yet, by host (reads the summarized acks' records: for a failure)."""
        folded = {(h, c) for records, compressed in self.folded
                  for h, c, _ in ackjournal.entries(records, compressed)}
        late: dict[str, list[str]] = {}
        for host, names in sorted(self.expected.items()):
            for c in sorted(names):
                if (host, c) not in self.acks and (host, c) not in self.dropped and (host, c) not in folded:
                    late.setdefault(host, []).append(c)
        return late
