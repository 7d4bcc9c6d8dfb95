"""The phase engine: drive every component through the schedule, one barrier per step.

For each step the engine sends "enter" to every participating host and waits until every
participant acked (or `need` of them did), under the step's deadline. The first failure
(an error ack, a component that exits badly, a lost daemon, a deadline, Ctrl-C) stops the
run; then every host is reset, everything gathered so far is fetched, and run.json says
where the run stopped.

`Run` holds a run's state and drives its steps; each part is a module of its own:
reaching the fleet (reach.py), the events its daemons send (events.py), a step
(step.py), the run's end (finish.py), the waits its failure cuts short (guard.py).
"""

from __future__ import annotations

import asyncio
from functools import partial

from netspec.protocol import kinds as k
from netspec.protocol.errors import Interrupted, NetspecError

from ..experiment.model import Plan, Step
from ..hosts.fleet import Lost
from ..hosts.forks import DaemonForks
from ..record.progress import Progress, ProgressSink
from ..record.results import ComponentResult
from ..record.rundir import RunDir
from ..record.saving import Saves
from .events import Inbox, Underway
from .failures import CONNECTING
from .faults import Faults
from .finish import end_component, finish
from .guard import Failure
from .reach import Fleet
from .step import Steps
from .stragglers import Stragglers


class Run:
    """One run of a plan. Lifecycle: `execute()` once; `interrupt()` from a signal handler."""

    def __init__(self, plan: Plan, rundir: RunDir, key: bytes, progress: ProgressSink,
                 accept_new_host_keys: bool = False, keep_daemons: bool = False, share_hosts: bool = False):
        self.plan, self.rundir, self.progress = plan, rundir, progress
        self.forks = DaemonForks()
        self.fleet = Fleet(plan, self.forks, key, accept_new_host_keys, keep_daemons, share_hosts, rundir.id)
        self.results = {c.name: ComponentResult(c.host, c.name, c.argv)
                        for c in plan.components}
        self.now = Underway()
        self.failure = Failure()
        self.saves = Saves(rundir)
        # k-of-n steps whose barrier opened before every participant acked: the rest are
        # waited for until the step's deadline, beside the steps that follow.
        self.stragglers = Stragglers(rundir.record, progress, self.saves.soon,
                                     partial(end_component, self.fleet.clients))
        self.inbox = Inbox(self.results, rundir, self.fleet.fan_out, self.stragglers, self.now,
                           self.failure, progress)
        self.faults = Faults(plan, self.fleet, rundir.record, progress, self.stragglers.trouble)
        self.steps = Steps(plan, self.fleet, rundir, self.results, progress, self.saves, self.stragglers,
                           self.inbox, self.now, self.failure, self.faults)

    @property
    def phase(self) -> str:
        """The phase of the step under way, or of the last one; "" before the first."""
        return self.now.phase

    def interrupt(self) -> None:
        self.failure.set(Interrupted(f"interrupted by the user {self._where()}"))

    async def execute(self) -> None:
        """Run every step, then always clean up and gather.

        Cancelling the task that runs it (an `asyncio.timeout` around it, Ctrl-C under
        `asyncio.run`) ends the run as an interrupt does: the run is cleaned up and
        gathered as interrupted, then the cancellation goes on to the caller.

        Raises:
            StepFailed, ComponentFailed, DeadlineExceeded, ConnectionLost, Interrupted:
            whatever stopped the run, after the run directory got everything it could.
            asyncio.CancelledError: the run was cancelled (after the same clean-up).
            Exception: any other, a fault of the controller's own, once the run was
            gathered and recorded as failed by it.
        """
        self.failure.open()
        error: Exception | None = None
        # The run's task group: each daemon connection's reader. The stragglers' watches have
        # a group of their own, ended as the run ends (`finish`: `Stragglers.run_ended`). The
        # local daemons' fork server is ended however the run ends (`finish` ends it first).
        async with self.forks, asyncio.TaskGroup() as tg, self.stragglers:
            self.faults.tg = tg
            try:
                await self.fleet.reach(self.rundir, self.progress, self._on_event, tg, self.failure)
                for index, step in enumerate(self.plan.schedule):
                    await self._step(index, step)
            except NetspecError as exc:
                error = exc
            except asyncio.CancelledError:
                # Not a run that went well: cleaned up and gathered as interrupted, and the
                # cancellation is the caller's, raised on once that is done.
                error = Interrupted(f"cancelled {self._where()}")
                self.failure.set(error)
                raise
            except Exception as exc:
                # A fault of the controller itself: the run is gathered and recorded as failed
                # by it (never ok with its later steps missing), then it goes on up as it is:
                # raised after the task group, which would wrap it in an ExceptionGroup.
                error = exc
            finally:
                self.faults.settle()
                await finish(error, self.now.phase, fleet=self.fleet, forks=self.forks, steps=self.steps,
                             stragglers=self.stragglers, saves=self.saves, failure=self.failure,
                             results=self.results, rundir=self.rundir)
        if error is not None:
            raise error

    def _on_event(self, host: str, event: k.Event | Lost) -> None:
        """An event from `host`: a fault's report or a role's claim to the run's faults (which
        see each component's end too), any other to its inbox."""
        if type(event) is k.FaultDone:
            self.faults.done(host, event)
        elif type(event) is k.Claimed:
            self.faults.claimed(host, event)
        elif type(event) is Lost and self.faults.lost(host):
            self._left(host)
        else:
            if type(event) is k.Exit:
                self.faults.ended(event.component)
            self.inbox.on_event(host, event)

    def _left(self, host: str) -> None:
        """`host`'s daemon was killed by the schedule: its components are out of the run
        (their steps neither wait for them nor fail for them), its files salvaged at collect."""
        why = "its host's daemon was killed by the schedule"
        names = [comp.name for comp in self.plan.host_components(host)]
        for name in names:
            self.stragglers.ended.setdefault(name, why)
        out = ", ".join(names) or "no component"
        self.progress(Progress("notice", host=host, text=f"host {host} left the run, its daemon killed by "
                               f"the schedule: {out} out of the steps after; its files salvaged at collect"))
        barrier = self.now.barrier
        if barrier is not None:
            for name in list(barrier.expected.get(host, ())):
                barrier.drop(host, name)

    async def _step(self, index: int, step: Step) -> None:
        await self.steps.step(index, step)

    def _where(self) -> str:
        return f"in phase '{self.now.phase}'" if self.now.phase else f"while {CONNECTING} to the hosts"
