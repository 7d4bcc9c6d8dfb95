"""The run's faults (the file's `faults:`, controller/experiment/faults.py) on the controller's
side: each sent to its host as the first step of its phase starts (or the run's first step,
for one with no phase), with its instant on the reference clock: that step's release
instant, or the instant it is sent, plus the fault's `after`. Each host does it at that
instant by its own clock estimate (daemon/faults.py) and reports it; the report is said live
and kept in run.json's `faults` with its audit: when the fault was done against its planned
instant, with its host's clock bound, and the effect its daemon observed, and when. A host
whose daemon the schedule killed is `gone`: the run goes on without it (run.py, step.py).

A partition or heal is sent to each host it leaves, a request per direction (its part of the
record). A fault aimed at a role is sent AIM_LEAD_S before its instant, to the component
that then holds it: the one whose claim came last (on the global timeline) and was not let
go, nor ended since; a heal or resume of a role undoes what the last partition or pause of
it chose. The choice, and its claim's instant, are recorded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import msgspec
from netspec.analysis.faultaudit import fault_line
from netspec.protocol import kinds as k
from netspec.protocol.errors import NetspecError
from netspec.protocol.links import LinkCondition, LinkRule
from netspec.protocol.runplan import PlanFault
from netspec.protocol.runrecord import FaultPart, FaultRecord, RunRecord

from ..experiment.model import Plan
from ..record.progress import Progress, ProgressSink
from .reach import Fleet

SEND_DEADLINE_S = 10.0  # a fault's request answered (it is only scheduled then) within this
# A daemon's connection lost this long before its kill_daemon's instant is not that fault's:
# the instant is on the reference clock, the loss seen on the controller's (+- their offset).
LOST_EARLY_NS = 50_000_000
# A fault aimed at a role is sent this long before its instant to the role's holder then: long
# enough for a request to reach its host (a round trip, ms) and be scheduled; a hand-over
# within it is not seen by that fault (its claim's instant, recorded, says so).
AIM_LEAD_S = 0.2
# What a role's undoing fault undoes: the last of this kind aimed at the same role.
UNDOES = {"heal": "partition", "resume": "pause"}


class Faults:
    """The run's fault schedule. Lifecycle: made with the run; `tg` set to the run's task
    group when it starts (each fault's request is a task of it, bounded by SEND_DEADLINE_S; a
    role's waits for its aim first); `phase_started` at each step's start; `claimed` for each
    role claimed, `ended` for each component's end, `done` for each report a host sends;
    `settle` as the run ends: a role's fault still waiting for its aim is cancelled; a fault
    never done says why in its record and makes the run partial; one done whose end was not
    reported (it lasted past the run) is said again."""

    def __init__(self, plan: Plan, fleet: Fleet, record: RunRecord, progress: ProgressSink,
                 trouble: Callable[[str, str, str, str], None]):
        self.faults, self.fleet, self.progress, self.trouble = plan.faults, fleet, progress, trouble
        self.plan, self.record = plan, record
        record.faults = [FaultRecord(index=i, kind=f.kind, target=f.target, host=f.host, role=f.role,
                                     phase=f.phase, after_s=f.after_s,
                                     parts=[FaultPart(host=a, peer=b) for a, b in f.directions()]
                                     if f.kind in k.LINK_FAULTS and f.role is None else [])
                         for i, f in enumerate(plan.faults)]
        self.started: set[str] = set()
        self.tg: asyncio.TaskGroup | None = None
        # netspec's own TCP ports, never partitioned: the run's link conditions' (Steps sets them).
        self.exclude_tcp: list[int] = []
        self.gone: set[str] = set()  # hosts whose daemon the schedule killed: out of the run
        self.holders: dict[str, k.Claimed] = {}  # each role's holder now: its last claim, placed
        self.aiming: set[asyncio.Task[None]] = set()  # the faults of a role waiting for their aim

    def phase_started(self, phase: str, instant_ns: int, index: int) -> None:
        """The first step of `phase`, step `index`, starts at `instant_ns` on the reference
        clock: each fault of that phase (and at the run's first step, each of no phase) is
        sent to its hosts (a role's, once aimed)."""
        if phase in self.started:
            return
        self.started.add(phase)
        for number, fault in enumerate(self.faults):
            if fault.phase == phase or (index == 0 and fault.phase is None):
                planned = instant_ns + round(fault.after_s * 1e9)
                self.record.faults[number].planned_ns = planned
                assert self.tg is not None
                if fault.role is None:
                    self.tg.create_task(self._send_all(number, fault, planned))
                else:  # its wait for its aim ends at its instant or at `settle`, whichever first
                    aiming = self.tg.create_task(self._aim(number, fault, planned))
                    self.aiming.add(aiming)
                    aiming.add_done_callback(self.aiming.discard)

    async def _send_all(self, number: int, fault: PlanFault, at_ns: int) -> None:
        said = self.record.faults[number]
        if said.parts:
            async with asyncio.TaskGroup() as tg:
                for part in said.parts:
                    tg.create_task(self._send(number, fault, at_ns, part.host, part.peer))
        else:
            await self._send(number, fault, at_ns, said.host, said.target)

    async def _aim(self, number: int, fault: PlanFault, at_ns: int) -> None:
        """Wait until AIM_LEAD_S before the instant, take the role's holder as the target,
        record the choice, and send the fault to it."""
        now = time.time_ns() - self.fleet.controller_offset[0]
        await asyncio.sleep(max(0.0, (at_ns - now) / 1e9 - AIM_LEAD_S))
        said = self.record.faults[number]
        chosen = self._chosen(number, fault)
        if isinstance(chosen, str):
            self._failed(number, chosen)
            return
        said.host, said.target, said.holder, said.claimed_ns = chosen
        now = time.time_ns() - self.fleet.controller_offset[0]
        if fault.kind in k.LINK_FAULTS:  # its holder's host against every other
            directions = fault.directions(isolated=said.host)
            said.parts = [FaultPart(host=a, peer=b) for a, b in directions]
            said.target = ", ".join(b for a, b in directions if a == said.host)
        aimed = f"host {said.host}, {said.holder}'s" if fault.kind in k.LINK_FAULTS else \
            f"{said.target} (host {said.host})"
        self.progress(Progress("notice", host=said.host, text=f"fault {number} {fault.kind} of role "
                               f"'{fault.role}': aimed at {aimed}, its claim {_ago(now, said.claimed_ns)}"))
        await self._send_all(number, fault, at_ns)

    def _chosen(self, number: int, fault: PlanFault) -> tuple[str, str, str, int] | str:
        """(host, target, holder, claimed_ns) for a fault aimed at a role, or why there is none."""
        assert fault.role is not None
        if (undone := UNDOES.get(fault.kind)) is not None:
            last = next((r for r in reversed(self.record.faults[:number])
                         if r.kind == undone and r.role == fault.role and r.claimed_ns is not None), None)
            if last is None:
                return (f"not done: no {undone} of role '{fault.role}' before it chose a target "
                        f"to {fault.kind}")
            return last.host, last.target, last.holder or "", last.claimed_ns
        holder = self.holders.get(fault.role)
        if holder is None:
            return f"not done: no component held role '{fault.role}' as its instant came"
        host = self.plan.component(holder.component).host
        target = holder.component if fault.kind in k.COMPONENT_FAULTS else host
        return host, target, holder.component, holder.at_ns

    async def _send(self, number: int, fault: PlanFault, at_ns: int, host: str, target: str) -> None:
        client = self.fleet.clients.get(host)
        try:
            if client is None:
                raise NetspecError(f"host {host} is not connected")
            given = {"component": target if fault.kind in k.COMPONENT_FAULTS else None,
                     "for_s": fault.for_s, "size": fault.size, "workers": fault.workers,
                     **(self._link(fault.kind, target) if fault.kind in k.LINK_FAULTS else {})}
            await client.request(k.FAULT, asyncio.get_running_loop().time() + SEND_DEADLINE_S,
                                 index=number, fault=fault.kind, at_ns=at_ns,
                                 **{key: value for key, value in given.items() if value is not None})
        except NetspecError as exc:
            self._failed(number, f"not scheduled on host {host}: {exc}", host, target)

    def _link(self, kind: str, peer: str) -> dict[str, object]:
        """A partition's or heal's rule: the direction from its host to `peer` (at the
        address its host reaches it). Its host cuts it on top of the conditions `links:` holds
        (LinkSet.cut), so a step changing them meanwhile neither lifts the partition nor is
        undone by its heal; never on netspec's own ports (SSH's, the daemons')."""
        rule = LinkRule(peer=peer, address=self.fleet.addresses[peer],
                        condition=LinkCondition(partition=kind == "partition"))
        return {"rule": msgspec.to_builtins(rule), "exclude_tcp": self.exclude_tcp}

    def claimed(self, host: str, claim: k.Claimed) -> None:
        """A component of `host` claimed a role, or let it go: the last claim (by its instant
        on the global timeline) holds it."""
        if claim.component not in {c.name for c in self.plan.host_components(host)}:
            self.progress(Progress("notice", host=host, text=f"host {host}: a claim of role '{claim.role}' "
                                   f"by {claim.component}, which is not one of its: ignored"))
            return
        placed = msgspec.structs.replace(claim, at_ns=claim.at_ns - (claim.offset_ns or 0))
        holder = self.holders.get(claim.role)
        if claim.held and (holder is None or holder.at_ns <= placed.at_ns):
            self.holders[claim.role] = placed
        elif not claim.held and holder is not None and holder.component == claim.component:
            del self.holders[claim.role]

    def ended(self, component: str) -> None:
        """`component`'s process ended: it holds no role any more."""
        for role, holder in list(self.holders.items()):
            if holder.component == component:
                del self.holders[role]

    def done(self, host: str, report: k.FaultDone) -> None:
        """A host's report of fault `report.index` (of one direction of a partition or heal):
        its audit in run.json, said live once every part of it is."""
        said = self.record.faults[report.index] if 0 <= report.index < len(self.record.faults) else None
        part = None if said is None else _part(said, host, report.target)
        if said is None or part is None:
            self.progress(Progress("notice", host=host, text=f"host {host}: a report of fault "
                                   f"{report.index}, which is not one of its: ignored"))
            return
        offset = report.offset_ns or 0  # unsynchronised: its own clock, as it was taken

        def placed(local: int | None) -> int | None:
            return None if local is None else local - offset
        part.done_ns, part.effect_ns, part.ended_ns = placed(report.done_ns), placed(report.effect_ns), \
            placed(report.ended_ns)
        part.through_ns, part.unfinished = placed(report.through_ns), not report.final
        part.bound_ns, part.unsynchronised = report.bound_ns, report.unsynchronised
        part.effect, part.error, part.measured = report.effect, report.error, dict(report.measured)
        if said.parts:
            _gather(said)
        if said.done_ns is not None and said.planned_ns is not None:
            said.late_ns = said.done_ns - said.planned_ns
        if said.effect_ns is not None and said.done_ns is not None and not said.parts:
            said.effect_after_ns = said.effect_ns - said.done_ns
        # a lasting fault's first report is recorded, said once it ends (or at settle)
        if report.final and all(p.done_ns is not None and not p.unfinished for p in said.parts):
            self.progress(Progress("notice", host=host, text=fault_line(said)))
        if report.error and report.final:
            self.trouble(said.phase or "run", host, report.target, f"fault {said.kind}: {report.error}")

    def lost(self, host: str) -> bool:
        """Whether `host`'s lost connection is the effect of the schedule's kill_daemon (sent,
        and its instant near or past): then it is recorded as that fault's effect (the
        instant the controller saw it, on the global timeline) and the host is `gone`."""
        now = time.time_ns() - self.fleet.controller_offset[0]
        for said in self.record.faults:
            if (said.kind == "kill_daemon" and said.host == host and said.planned_ns is not None
                    and now >= said.planned_ns - LOST_EARLY_NS):
                said.effect_ns = now
                said.effect = f"{said.effect}; its connection lost" if said.effect else "its connection lost"
                if said.done_ns is not None:
                    said.effect_after_ns = now - said.done_ns
                self.gone.add(host)
                self.progress(Progress("notice", host=host, text=fault_line(said)))
                return True
        return False

    def _failed(self, index: int, why: str, host: str | None = None, target: str | None = None) -> None:
        """Fault `index` (its direction from `host` to `target`, if a part's) was not done: why."""
        said = self.record.faults[index]
        part = None if host is None or target is None else _part(said, host, target)
        if part is not None and said.parts:
            part.error = why
            _gather(said)
        else:
            said.error = why
        host, target = host or said.host or "(none chosen)", target or said.target or f"role {said.role}"
        self.progress(Progress("notice", host=host, text=fault_line(said)))
        self.trouble(said.phase or "run", host, target, f"fault {said.kind}: {why}")

    def settle(self) -> None:
        """As the run ends: each fault with no report says why (its phase never came, or
        the run ended before its instant or its report), live and among the run's troubles:
        a run is ok only if every scheduled fault happened."""
        for aiming in self.aiming:
            aiming.cancel()
        for said in self.record.faults:
            why = "not done: its phase never started" if said.planned_ns is None else \
                "not done, or not reported, before the run ended"
            missing = [p for p in said.parts if p.done_ns is None and not p.error]
            if missing:  # each direction that never reported, said as its own
                for p in missing:
                    self._failed(said.index, why, p.host, p.peer)
            elif said.done_ns is None and not said.error:
                self._failed(said.index, why)
            elif said.unfinished:  # done, but it lasted (or looked for its effect) past the run
                self.progress(Progress("notice", host=said.host, text=fault_line(said)))


def _part(said: FaultRecord, host: str, target: str) -> FaultPart | FaultRecord | None:
    """Where a report of `said` from `host` about `target` goes: its direction's part, or the
    record itself (a fault of one host); None if it is not of it."""
    if said.parts:
        return said.part(host, target)
    return said if said.host == host else None


def _gather(said: FaultRecord) -> None:
    """A partition's or heal's audit from its directions': done once every one is (the
    last's instant), its effect and first packet through the first of theirs, its end the
    last's, what they measured the most of them; each direction's error named."""
    parts = said.parts
    done = [p.done_ns for p in parts]
    said.done_ns = None if None in done else max(d for d in done if d is not None)
    said.bound_ns = max((p.bound_ns for p in parts if p.bound_ns is not None), default=None)
    said.unsynchronised = any(p.unsynchronised for p in parts)
    first = min((p for p in parts if p.effect_ns is not None), key=lambda p: p.effect_ns or 0, default=None)
    said.effect_ns = None if first is None else first.effect_ns
    said.effect_after_ns = None if first is None or first.done_ns is None or first.effect_ns is None \
        else first.effect_ns - first.done_ns
    said.effect = _effects(parts)
    ends = [p.ended_ns for p in parts]
    said.ended_ns = None if None in ends else max(e for e in ends if e is not None)
    said.through_ns = min((p.through_ns for p in parts if p.through_ns is not None), default=None)
    said.error = "; ".join(f"{p.host}->{p.peer}: {p.error}" if len(parts) > 1 else p.error
                           for p in parts if p.error)
    said.unfinished = any(p.unfinished for p in parts)
    said.measured = {key: max(p.measured[key] for p in parts if key in p.measured)
                     for key in {key for p in parts for key in p.measured}}


def _effects(parts: list[FaultPart]) -> str:
    """Its directions' effects in a few words: the most said with its count, the others each
    with its direction (`n2->c: no packet dropped within 2 s`)."""
    said = [(p, p.effect.removeprefix(f"toward {p.peer}: ")) for p in parts if p.effect]
    if not said:
        return ""
    if len(parts) == 1:
        return said[0][1]
    texts = [text for _, text in said]
    most = max(texts, key=texts.count)
    others = [f"{p.host}->{p.peer}: {text}" for p, text in said if text != most]
    return "; ".join([f"{most} ({texts.count(most)} of {len(parts)} directions)", *others])


def _ago(now_ns: int, then_ns: int) -> str:
    """How long before `now_ns` a claim at `then_ns` was (both on the global timeline)."""
    ago = (now_ns - then_ns) / 1e9
    return f"{ago:.3f} s before" if ago >= 0 else f"{-ago * 1e6:.0f} us after (within the clocks' bounds)"
