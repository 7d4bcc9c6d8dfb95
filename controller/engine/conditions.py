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
from datetime import UTC, datetime

from netspec.protocol import messages as m
from netspec.protocol.errors import NetspecError
from netspec.protocol.kinds import LINK_FAULTS, LinksReply
from netspec.protocol.links import LinkCondition, LinkRule
from netspec.protocol.runrecord import HostLinks, LinkChange, RunRecord
from netspec.protocol.runrecord import Step as StepRecord

from ..experiment.links import LOCAL
from ..experiment.model import Plan
from ..record.progress import Progress, ProgressSink
from ..record.rundir import RunDir
from .reach import Fleet

SSH_PORT = 22


def took_effect(reply: LinksReply, pairs: list[str]) -> LinkChange:
    """A host's change as run.json records it: the window it took effect in on the host's
    clock (from just before its first part was submitted to just after its last returned),
    and on the global timeline its midpoint, the bound its clock's bound plus half its width
    (the change may have taken effect anywhere in it)."""
    change = LinkChange(pairs=pairs, began_ns=reply.began_ns, applied_ns=reply.applied_ns,
                        placements=reply.placements)
    if reply.clock is not None and reply.applied_ns is not None:
        offset, bound = reply.clock
        began = reply.applied_ns if reply.began_ns is None else reply.began_ns
        half = (reply.applied_ns - began + 1) // 2
        change.at_ns, change.bound_ns = (began + reply.applied_ns) // 2 - offset, bound + half
    return change


def change_said(change: LinkChange) -> str:
    """When a change took effect, in words: its window's width, and its instant and bound on
    the global timeline (`show` and the live output say it alike)."""
    if change.began_ns is None or change.applied_ns is None:
        return "not applied"
    text = f"in effect within a {(change.applied_ns - change.began_ns) / 1e6:.2f} ms window"
    if change.at_ns is None or change.bound_ns is None:
        return text + " (no clock estimate: not on the global timeline)"
    at = datetime.fromtimestamp(change.at_ns / 1e9, UTC).strftime("%H:%M:%S.%f")
    return text + f", at {at} UTC ± {change.bound_ns / 1e3:.0f} us"


def record_lines(record: RunRecord, host: str | None = None) -> list[str]:
    """`show`'s lines on a run's link conditions (none for a run without): each host's
    backends (what its kernel offers, where each part of each condition went), and each
    step's changes (the directions, their conditions as the plan resolved them, when each
    host's change took effect). `host`: that host's alone."""
    plan = record.plan
    if plan is None or (not plan.links and not any(s.links for s in plan.schedule)):
        return []
    out = ["Link conditions:"]
    for name, hosts in sorted(record.hosts.items()):
        links = hosts.links
        if links is None or host not in (None, name):
            continue
        offer = links.offer
        have = [k for k in ("netem", "htb", "tbf", "nftables", "iptables", "nfqueue")
                if offer is not None and getattr(offer, k, False)]
        out.append(f"  host {name}: offers {', '.join(have) or 'no backend'}")
        for peer, placement in sorted(links.placements.items()):
            parts = ", ".join(f"{part} by {backend}" for part, backend in placement.parts.items())
            out.append(f"    {name} -> {peer}: {parts}")
    for index, step in enumerate(record.steps):
        planned = plan.schedule[index] if index < len(plan.schedule) else None
        state = planned.link_state if planned is not None else {}
        for name, change in sorted(step.links.items()):
            if host not in (None, name):
                continue
            out.append(f"  step {index} ({step.phase}): host {name} changed {len(change.pairs)} "
                       f"direction(s), {change_said(change)}")
            for pair in change.pairs:
                condition = state.get(pair)
                said = condition.said() if condition is not None and not condition.empty else "cleared"
                out.append(f"    {pair.replace('->', ' -> ')}: {said}")
    return out


class Conditions:
    """A run's link conditions, as the controller asks its hosts for them. Lifecycle: made
    with the run; `check` once the fleet is reached (at launch, before the first change),
    `apply` at each step's release. Removing them is each daemon's (its run's end)."""

    def __init__(self, plan: Plan, fleet: Fleet, rundir: RunDir, progress: ProgressSink):
        self.plan, self.fleet, self.rundir, self.progress = plan, fleet, rundir, progress
        # A partition's or heal's direction (its host -> its peer): checked at launch as links' are.
        self.cuts = sorted({d for f in plan.faults if f.kind in LINK_FAULTS for d in f.directions()})
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
            change = took_effect(reply, [f"{host}->{r.peer}" for r in asked[host]])
            record.links[host] = change
            said.append(f"{host} ({len(asked[host])} direction(s), {change_said(change)})")
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
