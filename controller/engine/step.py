"""One step of a run: its link conditions changed (conditions.py), then its enter sent to every
participant (at a release instant, if the step asks for one), its barrier waited for under the
step's deadline, a k-of-n step's stragglers followed, at collect the fleet's files fetched;
and the step's record in run.json."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from netspec.protocol.errors import (
    ComponentFailed,
    ConnectionLost,
    DeadlineExceeded,
    NetspecError,
    RemoteError,
    StepFailed,
)
from netspec.protocol.runrecord import Step as StepRecord
from netspec.protocol.runrecord import StepHost, Summarized

from ..experiment.model import Plan, Step
from ..gather.fetch import fetch_fleet
from ..record.progress import Progress, ProgressSink
from ..record.results import ComponentResult
from ..record.rundir import RunDir
from ..record.saving import Saves
from . import release
from .barrier import Barrier
from .conditions import Conditions
from .events import Inbox, Underway
from .failures import step_failures
from .faults import Faults
from .guard import Failure, guard
from .participants import StepPlan, StepPlans
from .reach import Fleet
from .stragglers import Stragglers


class Steps:
    """A run's steps, one `step()` at a time, each recorded in run.json. Owned by a Run, with
    the parts of it a step reads and writes; `collected` once the fleet's files were
    fetched (at collect, or at the run's end, finish.py)."""

    def __init__(self, plan: Plan, fleet: Fleet, rundir: RunDir, results: dict[str, ComponentResult],
                 progress: ProgressSink, saves: Saves, stragglers: Stragglers, inbox: Inbox,
                 now: Underway, failure: Failure, faults: Faults):
        self.fleet, self.rundir, self.results, self.progress = fleet, rundir, results, progress
        self.faults = faults
        self.saves, self.stragglers, self.inbox = saves, stragglers, inbox
        self.now, self.failure = now, failure
        self.components = {c.name: c for c in plan.components}
        self.step_plans = StepPlans(plan)
        self.conditions = Conditions(plan, fleet, rundir, progress)
        faults.exclude_tcp = self.conditions.exclude_tcp  # a partition fault leaves them alone too
        self.collected = False

    async def step(self, index: int, step: Step) -> None:
        """Step `index` of the schedule, through: its enter sent, its barrier opened (a k-of-n
        step's stragglers then followed by `Stragglers`), at collect the files
        fetched, all under the step's deadline.

        Raises:
            StepFailed: a component failed, a daemon was lost or the deadline passed (each
                host's part named).
            NetspecError: the run's failure (an interrupt, a daemon's protocol error), if it
                came first.
            asyncio.CancelledError: the run was cancelled (the step recorded as failed).
        """
        loop = asyncio.get_running_loop()
        self.now.phase = step.phase
        deadline = loop.time() + step.deadline_s
        started = time.time_ns()
        record = StepRecord(step.phase, "running", entered_ns=started)
        self.rundir.record.steps.append(record)
        self.rundir.journal_step(index)  # its start: where a run is, while it runs
        # A step that lasts shows its hosts' acks in run.json as they come, a save a second
        # at most (a short one is in the journal at its end, and saves nothing else).
        self.saves.during(record)
        self.progress(Progress("step", step.phase))
        fan_out, inbox = self.fleet.fan_out, self.inbox
        barrier = None
        try:
            if self.conditions.any:  # the step's link conditions, in effect before anyone enters
                changing = self.conditions.apply(index, step.phase, record, deadline)
                await guard(self.failure, changing, deadline, lambda: DeadlineExceeded(
                    step.phase, {h: ["its link conditions"] for h in self.fleet.clients}, step.deadline_s))
            plan = self.step_plans.of(step, inbox.registered, self.stragglers.ended)
            plan = without(plan, self.faults.gone)
            # In a tree, a step every participant must ack comes back summarized (fanout.py):
            # its hosts' entries reach run.json through the ack journal, not one by one here.
            summarize = fan_out.tree is not None and step.need is None
            record.hosts = {} if summarize else {h: StepHost(components={}) for h in plan.participants}
            barrier = self.now.barrier = Barrier(index, step, plan.participants, plan.count)
            if step.need is not None:
                self.stragglers.kofn[index] = barrier
            scheduled: dict[str, Any] = {}
            if step.release == "at":
                lead = release.lead_s(step, len(plan.participants))
                record.release = release.planned(lead, self.fleet.controller_offset[0])
                scheduled = {"release_ns": record.release.instant_ns}
            # The phase starts at its release instant, or now: its faults are due from then.
            begins = record.release.instant_ns
            if begins is None:
                begins = release.instant_ns(0, self.fleet.controller_offset[0])
            self.faults.phase_started(step.phase, begins, index)
            sent = fan_out.send(plan.enters, {"phase": step.phase, "step": index,
                                              "deadline_s": step.deadline_s,
                                              "published": inbox.published, **scheduled}, summarize)
            if summarize:
                record.sent_ns = sent  # a tree's: one instant for the first level
            else:
                for host, info in record.hosts.items():
                    info.sent_ns = sent if isinstance(sent, int) else sent[host]
            opened = barrier.opened  # who the deadline caught waiting: participants, or files

            def missed() -> DeadlineExceeded:
                waiting = {h: ["files"] for h in self.fleet.clients} if opened.done() else barrier.waiting()
                return DeadlineExceeded(step.phase, waiting, step.deadline_s)
            await guard(self.failure, self._through(step, barrier, deadline), deadline, missed)
            record.status = "ok"
        except (ComponentFailed, RemoteError, ConnectionLost, DeadlineExceeded) as exc:
            record.status = "failed"
            if barrier is None:
                raise
            for host in barrier.waiting():  # a summarized step's record has only those that acked
                record.hosts.setdefault(host, StepHost(components={}, sent_ns=record.sent_ns))
            raise StepFailed(step.phase, step_failures(barrier, exc, self.results, self.components)) from exc
        except (NetspecError, asyncio.CancelledError):
            record.status = "failed"
            raise
        finally:
            self.saves.step_ended()
            self.now.barrier = None  # acks still arriving are recorded, not waited for
            record.left_ns = left = time.time_ns()
            record.duration_s = took = (left - started) / 1e9
            folded = inbox.folded.pop(index, None)
            if folded is not None:
                record.summarized = Summarized(folded.hosts, folded.acks, folded.slowest)
            record.release = release.skew(record, folded)
            self.rundir.journal_step(index)
        self.progress(Progress("step_done", step.phase, seconds=took, text=release.skew_text(record.release)))

    async def _through(self, step: Step, barrier: Barrier, deadline: float) -> None:
        """A step's work once its enter is sent, in the step's task group (`guard`): its
        barrier opened; the stragglers of a k-of-n step followed (by `Stragglers`' own
        watches, until the step's deadline); at collect, the fleet's files fetched."""
        await asyncio.shield(barrier.opened)  # others wait on it too: not cancelled with this wait
        if not barrier.complete.done():
            now = self.now
            self.stragglers.follow(barrier, deadline, lambda: now.barrier)
        if step.phase == "collect":
            await self.collect(deadline)

    async def collect(self, deadline: float) -> None:
        """The run's files closed and the fleet's fetched, each request by `deadline`."""
        self.rundir.close_files()

        def fetched() -> None:
            self.collected = True  # not again at the end, even if a host's files were lost
        await fetch_fleet(self.fleet.clients, self.fleet.hosts, self.rundir, self.results, self.progress,
                          deadline, fetched, left=self.faults.gone)


def without(plan: StepPlan, gone: set[str]) -> StepPlan:
    """`plan` without the hosts whose daemon the schedule killed (controller/engine/faults.py):
    neither their components nor their daemon's node part take part any more."""
    if not gone or not gone & set(plan.participants):
        return plan
    participants = {h: names for h, names in plan.participants.items() if h not in gone}
    return StepPlan(participants, sum(map(len, participants.values())),
                    {h: enters for h, enters in plan.enters.items() if h not in gone})
