"""The run's faults (the file's `faults:`, controller/experiment/faults.py) on the controller's
side: each sent to its host as the first step of its phase starts (or the run's first step,
for one with no phase), with its instant on the reference clock: that step's release
instant, or the instant it is sent, plus the fault's `after`. Each host does it at that
instant by its own clock estimate (daemon/faults.py) and reports it; the report is said live
and kept in run.json's `faults` with its audit: when the fault was done against its planned
instant, with its host's clock bound, and the effect its daemon observed, and when. A host
whose daemon the schedule killed is `gone`: the run goes on without it (run.py, step.py).
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
from netspec.protocol.runrecord import FaultRecord, RunRecord

from ..experiment.model import Plan
from ..record.progress import Progress, ProgressSink
from .reach import Fleet

SEND_DEADLINE_S = 10.0  # a fault's request answered (it is only scheduled then) within this
# A daemon's connection lost this long before its kill_daemon's instant is not that fault's:
# the instant is on the reference clock, the loss seen on the controller's (+- their offset).
LOST_EARLY_NS = 50_000_000


class Faults:
    """The run's fault schedule. Lifecycle: made with the run; `tg` set to the run's task
    group when it starts (each fault's request is a task of it, bounded by SEND_DEADLINE_S);
    `phase_started` at each step's start; `done` for each report a host sends; `settle` as
    the run ends: a fault never done says why in its record and makes the run partial; one
    done whose end was not reported (it lasted past the run) is said again."""

    def __init__(self, plan: Plan, fleet: Fleet, record: RunRecord, progress: ProgressSink,
                 trouble: Callable[[str, str, str, str], None]):
        self.faults, self.fleet, self.progress, self.trouble = plan.faults, fleet, progress, trouble
        self.record = record
        record.faults = [FaultRecord(index=i, kind=f.kind, target=f.target, host=f.host, entry=f.entry,
                                     phase=f.phase, after_s=f.after_s) for i, f in enumerate(plan.faults)]
        self.started: set[str] = set()
        self.tg: asyncio.TaskGroup | None = None
        # netspec's own TCP ports, never partitioned: the run's link conditions' (Steps sets them).
        self.exclude_tcp: list[int] = []
        self.gone: set[str] = set()  # hosts whose daemon the schedule killed: out of the run

    def phase_started(self, phase: str, instant_ns: int, index: int) -> None:
        """The first step of `phase`, step `index`, starts at `instant_ns` on the reference
        clock: each fault of that phase (and at the run's first step, each of no phase) is
        sent to its host."""
        if phase in self.started:
            return
        self.started.add(phase)
        for number, fault in enumerate(self.faults):
            if fault.phase == phase or (index == 0 and fault.phase is None):
                planned = instant_ns + round(fault.after_s * 1e9)
                self.record.faults[number].planned_ns = planned
                assert self.tg is not None
                self.tg.create_task(self._send(number, fault, planned))

    async def _send(self, number: int, fault: PlanFault, at_ns: int) -> None:
        client = self.fleet.clients.get(fault.host)
        try:
            if client is None:
                raise NetspecError(f"host {fault.host} is not connected")
            given = {"component": fault.target if fault.kind in k.COMPONENT_FAULTS else None,
                     "for_s": fault.for_s, "size": fault.size, "workers": fault.workers,
                     **(self._link(fault) if fault.kind in k.LINK_FAULTS else {})}
            await client.request(k.FAULT, asyncio.get_running_loop().time() + SEND_DEADLINE_S,
                                 index=number, fault=fault.kind, at_ns=at_ns,
                                 **{key: value for key, value in given.items() if value is not None})
        except NetspecError as exc:
            self._failed(number, f"not scheduled on host {fault.host}: {exc}")

    def _link(self, fault: PlanFault) -> dict[str, object]:
        """A partition's or heal's rule: the direction from its host to its peer (at the
        address its host reaches it). Its host cuts it on top of the conditions `links:` holds
        (LinkSet.cut), so a step changing them meanwhile neither lifts the partition nor is
        undone by its heal; never on netspec's own ports (SSH's, the daemons')."""
        rule = LinkRule(peer=fault.target, address=self.fleet.addresses[fault.target],
                        condition=LinkCondition(partition=fault.kind == "partition"))
        return {"rule": msgspec.to_builtins(rule), "exclude_tcp": self.exclude_tcp}

    def done(self, host: str, report: k.FaultDone) -> None:
        """A host's report of fault `report.index`: its audit in run.json, said live."""
        if not 0 <= report.index < len(self.faults) or self.faults[report.index].host != host:
            self.progress(Progress("notice", host=host, text=f"host {host}: a report of fault "
                                   f"{report.index}, which is not one of its: ignored"))
            return
        said = self.record.faults[report.index]
        offset = report.offset_ns or 0  # unsynchronised: its own clock, as it was taken

        def placed(local: int | None) -> int | None:
            return None if local is None else local - offset
        said.done_ns, said.effect_ns, said.ended_ns = placed(report.done_ns), placed(report.effect_ns), \
            placed(report.ended_ns)
        said.through_ns, said.unfinished = placed(report.through_ns), not report.final
        said.bound_ns, said.unsynchronised = report.bound_ns, report.unsynchronised
        if said.done_ns is not None and said.planned_ns is not None:
            said.late_ns = said.done_ns - said.planned_ns
        if report.effect_ns is not None and report.done_ns is not None:
            said.effect_after_ns = report.effect_ns - report.done_ns
        said.effect, said.measured, said.error = report.effect, dict(report.measured), report.error
        if report.final:  # a lasting fault's first report is recorded, said once it ends (or at settle)
            self.progress(Progress("notice", host=host, text=fault_line(said)))
        if report.error and report.final:
            self.trouble(said.phase or "run", host, said.target, f"fault {said.kind}: {report.error}")

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

    def _failed(self, index: int, why: str) -> None:
        said = self.record.faults[index]
        said.error = why
        self.progress(Progress("notice", host=said.host, text=fault_line(said)))
        self.trouble(said.phase or "run", said.host, said.target, f"fault {said.kind}: {why}")

    def settle(self) -> None:
        """As the run ends: each fault with no report says why (its phase never came, or
        the run ended before its instant or its report), live and among the run's troubles:
        a run is ok only if every scheduled fault happened."""
        for said in self.record.faults:
            if said.done_ns is None and not said.error:
                self._failed(said.index, "not done: its phase never started" if said.planned_ns is None
                             else "not done, or not reported, before the run ended")
            elif said.unfinished:  # done, but it lasted (or looked for its effect) past the run
                self.progress(Progress("notice", host=said.host, text=fault_line(said)))
