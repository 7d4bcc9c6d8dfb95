"""The controller's side of a run's link conditions (the file's `links:`, netspec.links on
each host): at launch every host that will condition a link is asked whether it can (all the
conditions the run will ask of it, at once: a condition no backend there can apply fails the
run naming the host, the link and what is missing) and what its kernel offers (run.json's
host `links`); at each step that changes them, the hosts that send on a changed direction
apply it, and the step's enter goes only once every one replied (under the step's
deadline). Each reply's instant of effect, on the host's clock, is put on the global
timeline with its bound: the step's `links` in run.json, and a line of live output.

A direction's condition is applied by the host its packets leave. netspec's own traffic is
never conditioned: each host is told the ports to leave alone, SSH's and the daemons' (TCP),
and it adds clksync's (UDP) itself.
"""

from __future__ import annotations

import asyncio

from netspec.protocol import messages as m
from netspec.protocol.errors import NetspecError
from netspec.protocol.kinds import LINK_FAULTS, LinksReply
from netspec.protocol.links import LinkCondition, LinkRule
from netspec.protocol.runrecord import HostLinks, LinkChange
from netspec.protocol.runrecord import Step as StepRecord

from ..experiment.links import LOCAL
from ..experiment.model import Plan
from ..record.progress import Progress, ProgressSink
from ..record.rundir import RunDir
from .reach import Fleet

SSH_PORT = 22


class Conditions:
    """A run's link conditions, as the controller asks its hosts for them. Lifecycle: made
    with the run; `check` once the fleet is reached (at launch, before the first change),
    `apply` at each step's release. Removing them is each daemon's (its run's end)."""

    def __init__(self, plan: Plan, fleet: Fleet, rundir: RunDir, progress: ProgressSink):
        self.plan, self.fleet, self.rundir, self.progress = plan, fleet, rundir, progress
        # A partition's or heal's direction (its host -> its peer): checked at launch as links' are.
        self.cuts = sorted({(f.host, f.target) for f in plan.faults if f.kind in LINK_FAULTS})
        self.any = bool(plan.links) or any(s.links for s in plan.schedule) or bool(self.cuts)
        # Filled at `check`, when every daemon is reached (a fault's request shares the list).
        self.exclude_tcp: list[int] = own_ports(plan, {})
        self.checked = False

    def _rules(self, changes: dict[tuple[str, str], LinkCondition]) -> dict[str, list[LinkRule]]:
        """The rules each sending host applies, by host."""
        rules: dict[str, list[LinkRule]] = {}
        for (source, target), condition in changes.items():
            rules.setdefault(source, []).append(
                LinkRule(peer=target, address=self.fleet.addresses[target], condition=condition))
        return rules

    async def check(self, phase: str, deadline: float) -> None:
        """Ask each host that will condition a direction whether it can, for every condition
        the run will ask of it (its `links:`, and a partition for each partition or heal the
        schedule does there); record what each offers and where each part goes.

        Raises:
            NetspecError: a link, a partition or a heal names a local daemon (they share this
                machine's stack).
            RemoteError: a host cannot apply a condition (its daemon names the link and what
                is missing), or refused otherwise.
            DeadlineExceeded: a host did not answer by `deadline`.
            ConnectionLost: a host's daemon was lost.
        """
        self.checked = True
        local = {h.name for h in self.plan.hosts if h.local}
        for pairs in [*self.plan.link_states(), self.cuts]:  # a plan not read from a file is held to it too
            for pair in pairs:
                if local & set(pair):
                    said = LOCAL.format(min(local & set(pair)))
                    raise NetspecError(f"link {pair[0]} -> {pair[1]}: {said}")
        self.exclude_tcp[:] = own_ports(self.plan, self.fleet.endpoints)
        asked: dict[str, list[LinkRule]] = {}
        for state in self.plan.link_states():
            for host, rules in self._rules(state).items():
                asked.setdefault(host, []).extend(r for r in rules if r not in asked.get(host, []))
            for _, target in state:  # a host a link ends at: asked too, to take the audit's probes
                asked.setdefault(target, [])
        for host, target in self.cuts:
            cut = LinkRule(peer=target, address=self.fleet.addresses[target],
                           condition=LinkCondition(partition=True))
            if cut not in asked.setdefault(host, []):
                asked[host].append(cut)
        if not asked:
            return
        replies = await self._ask(asked, phase, deadline, check=True)
        for host, reply in replies.items():
            self.rundir.record.hosts[host].links = HostLinks(offer=reply.offer, placements=reply.placements)
        self.rundir.save()

    async def apply(self, index: int, phase: str, record: StepRecord, deadline: float) -> None:
        """Apply what step `index`'s release changes, on every host that sends on a changed
        direction, and record when each took effect. Nothing to do for a step that changes
        nothing.

        Raises:
            RemoteError, DeadlineExceeded: as `check`.
        """
        if not self.checked:  # at launch, whichever step changes them first
            await self.check(phase, deadline)
        changes = self.plan.link_changes(index)
        if not changes:
            return
        asked = self._rules(changes)
        replies = await self._ask(asked, phase, deadline, check=False)
        said = []
        for host, reply in replies.items():
            change = LinkChange(pairs=[f"{host}->{r.peer}" for r in asked[host]], began_ns=reply.began_ns,
                                applied_ns=reply.applied_ns, placements=reply.placements)
            if reply.clock is not None and reply.applied_ns is not None:
                offset, bound = reply.clock
                change.at_ns, change.bound_ns = reply.applied_ns - offset, bound
            record.links[host] = change
            took = (reply.applied_ns - reply.began_ns) / 1e6 if reply.applied_ns and reply.began_ns else 0.0
            bound_text = f" ± {change.bound_ns / 1e3:.0f} us" if change.bound_ns is not None else ""
            said.append(f"{host} ({len(asked[host])} direction(s), in effect after {took:.1f} ms"
                        f"{bound_text})")
            for rule in asked[host]:
                said.append(f"  {host} -> {rule.peer}: {rule.condition.said()}")
        # In run.json at once (a step saved live is read from run.json, not the journal): a
        # controller killed in the step leaves it recorded.
        self.rundir.save()
        self.progress(Progress("notice", phase, text="link conditions changed: " + "; ".join(said)))

    async def _ask(self, asked: dict[str, list[LinkRule]], phase: str, deadline: float,
                   check: bool) -> dict[str, LinksReply]:
        """Each host's reply, every request under `deadline` (DeadlineExceeded names the host)."""
        clients = self.fleet.clients
        replies = await asyncio.gather(*(
            clients[h].request(m.LINKS, deadline, during=phase, rules=asked[h], check=check,
                               exclude_tcp=self.exclude_tcp) for h in asked))
        return dict(zip(asked, replies, strict=True))


def own_ports(plan: Plan, endpoints: dict[str, tuple[str, int]]) -> list[int]:
    """netspec's own TCP ports, never conditioned: SSH's, and every daemon's as it was reached
    (`endpoints`: a docker host's daemon listens on a port of its own, reached directly, and
    in a fan-out tree the daemons connect to each other there), or as its `address:` says."""
    ports = {int(h.address.rpartition(":")[2]) for h in plan.hosts if h.address}
    return sorted({SSH_PORT, *ports, *(port for _, port in endpoints.values())})
