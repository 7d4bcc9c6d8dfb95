"""The phase engine: drive every component through the schedule, one barrier per step.

For each step the engine sends "enter" to every participating host and waits until every
participant acked (or `need` of them did), under the step's deadline. The first failure
(an error ack, a component that exits badly, a lost daemon, a deadline, Ctrl-C) stops the
run; then every host is reset, everything gathered so far is fetched, and run.json says
where the run stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

import msgspec
from netspec.protocol import acksummary
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.acksummary import AckSummary
from netspec.protocol.errors import (
    ComponentFailed,
    ConnectionLost,
    DeadlineExceeded,
    Interrupted,
    NetspecError,
    ProtocolError,
    RemoteError,
    StepFailed,
    without_names,
)
from netspec.protocol.exits import describe_returncode, kill_run_processes
from netspec.protocol.runoutcome import RunOutcome
from netspec.protocol.runrecord import (
    Clock,
    ClockSync,
    ComponentEnd,
    Entry,
    FanOutTree,
    HostRecord,
    StepHost,
    Summarized,
)
from netspec.protocol.runrecord import Step as StepRecord

from ..experiment.model import Host as HostSpec
from ..experiment.model import Plan, Step
from ..gather.fetch import fetch_fleet
from ..hosts.fleet import (
    AddressHost,
    DaemonClient,
    Host,
    LocalHost,
    Lost,
    connect_deadline_s,
    ensure_fd_limit,
)
from ..hosts.forks import DaemonForks
from ..record.progress import Progress, ProgressSink
from ..record.results import ComponentResult
from ..record.rundir import RunDir
from ..record.saving import Saves
from . import release
from .barrier import Barrier
from .clocks import start_clocks, stretched
from .failures import CONNECTING, Unreachable, ack_failure, connect_failed, not_reached, step_failures
from .fanout import FanOut, Tree
from .participants import StepPlans
from .stragglers import Stragglers

CLEANUP_DEADLINE_S = 30.0
FAN_OUT = 32


def make_host(spec: HostSpec, forks: DaemonForks, accept_new: bool = False,
              keep_daemons: bool = False) -> Host:
    """The Host for a spec. Local daemons are forked by `forks`; `accept_new` trusts
    unknown SSH host keys; `keep_daemons` starts SSH hosts' daemons detached, to outlive
    the run."""
    if spec.ssh:
        from ..hosts.remote import SSHHost  # paramiko loads only for a fleet with SSH hosts

        return SSHHost(spec, accept_new, detached=keep_daemons)
    return AddressHost(spec) if spec.address else LocalHost(spec, forks)


class Run:
    """One run of a plan. Lifecycle: `execute()` once; `interrupt()` from a signal handler."""

    def __init__(self, plan: Plan, rundir: RunDir, key: bytes, progress: ProgressSink,
                 accept_new_host_keys: bool = False, keep_daemons: bool = False, share_hosts: bool = False):
        self.plan, self.rundir, self.key, self.progress = plan, rundir, key, progress
        self.share_hosts = share_hosts  # set up beside another run a host's daemon holds
        self.forks = DaemonForks()
        self.hosts: dict[str, Host] = {h.name: make_host(h, self.forks, accept_new_host_keys, keep_daemons)
                                       for h in plan.hosts}
        self.clients: dict[str, DaemonClient] = {}
        self.fan_out = FanOut(self.clients, Tree.over(plan.fan_out, tuple(self.hosts), plan.clock.reference)
                              if plan.fan_out else None)
        self.endpoints: dict[str, tuple[str, int]] = {}  # where each daemon was reached
        self.facts: dict[str, dict[str, Any]] = {}
        self.addresses: dict[str, str] = {}
        # This controller's clock minus the reference host's, +- half the hello's round trip.
        self.controller_offset: tuple[int, int | None] = (0, None)
        self.components = {c.name: c for c in plan.components}
        self.step_plans = StepPlans(plan)
        self.results = {c.name: ComponentResult(c.host, c.name, c.argv)
                        for c in plan.components}
        self.registered: dict[str, list[str]] = {}
        self.published: dict[str, dict[str, Any]] = {}
        self.barrier: Barrier | None = None
        self.folded: dict[int, AckSummary] = {}  # step -> the acks summarized for it so far
        # k-of-n steps whose barrier opened before every participant acked: the rest are
        # waited for until the step's deadline, beside the steps that follow.
        self.saves = Saves(rundir)
        self.stragglers = Stragglers(rundir.record, progress, self.saves.soon, self._end)
        self.phase = ""  # none before the first step (while CONNECTING)
        self.collected = False
        self.failure: asyncio.Future[None]
        self.tg: asyncio.TaskGroup

    def interrupt(self) -> None:
        self._fail(Interrupted(f"interrupted by the user {self._where()}"))

    def _fail(self, exc: NetspecError) -> None:
        if not self.failure.done():
            self.failure.set_exception(exc)

    async def execute(self) -> None:
        """Run every step, then always clean up and gather.

        Cancelling the task that runs it (an `asyncio.timeout` around it, Ctrl-C under
        `asyncio.run`) ends the run as an interrupt does: the run is cleaned up and
        gathered as interrupted, then the cancellation goes on to the caller.

        Raises:
            StepFailed, ComponentFailed, DeadlineExceeded, ConnectionLost, Interrupted:
            whatever stopped the run, after the run directory got everything it could.
            asyncio.CancelledError: the run was cancelled (after the same clean-up).
        """
        self.failure = asyncio.get_running_loop().create_future()
        error: NetspecError | None = None
        # The run's task group: each daemon connection's reader, the stragglers. The local
        # daemons' fork server is ended however the run ends (`_finish` ends it first).
        async with self.forks, asyncio.TaskGroup() as tg:
            self.tg = tg
            try:
                await self._start_fleet()
                for index, step in enumerate(self.plan.schedule):
                    await self._step(index, step)
            except NetspecError as exc:
                error = exc
            except asyncio.CancelledError:
                # Not a run that went well: cleaned up and gathered as interrupted, and the
                # cancellation is the caller's, raised on once that is done.
                error = Interrupted(f"cancelled {self._where()}")
                self._fail(error)
                raise
            finally:
                await self._finish(error)
        if error is not None:
            raise error

    def _where(self) -> str:
        return f"in phase '{self.phase}'" if self.phase else f"while {CONNECTING} to the hosts"

    async def _guard(self, work: Coroutine[Any, Any, Any], deadline: float,
                     on_timeout: Callable[[], NetspecError]) -> Any:
        """Run `work` in a task group of its own under `deadline` (loop time), unless the run
        fails first: its result. The work's task is ended and awaited on every way out, so
        nothing it started outlives the wait; a cancellation of this wait goes on to the
        caller once it is.

        Raises:
            NetspecError: the run's failure, if it came first (or by the deadline); what
                `on_timeout` makes, if the deadline passed; what `work` raised.
        """
        error: BaseException | None = None
        try:
            async with asyncio.timeout_at(deadline), asyncio.TaskGroup() as tg:
                task = tg.create_task(work)
                tg.create_task(self._until_failed(task))
            return task.result()
        except TimeoutError:
            if self.failure.done():
                self.failure.result()  # the failure is the news, not the deadline it cut short
            raise on_timeout() from None
        except BaseExceptionGroup as group:  # one of the two raised, and the other was cancelled
            error = group.exceptions[0]
        raise error

    async def _until_failed(self, work: asyncio.Task[Any]) -> None:
        """Raise the run's failure if it comes before `work` ends (which then is cancelled)."""
        await asyncio.wait({work, self.failure}, return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            self.failure.result()

    # -- fleet ------------------------------------------------------------------------

    async def _start_fleet(self) -> None:
        loop = asyncio.get_running_loop()
        ensure_fd_limit(len(self.hosts))
        connect_s = self.plan.connect_deadline_s or connect_deadline_s(list(self.hosts.values()))
        self.rundir.record.connect_deadline_s = connect_s
        deadline = loop.time() + connect_s
        gate = asyncio.Semaphore(FAN_OUT)
        join_token = os.urandom(16)  # what a parent in the run's fan-out tree shows its children

        async def reach(name: str) -> None:
            async with gate:
                try:
                    address = self.endpoints[name] = await self.hosts[name].start(self.rundir.host_dir(name))
                    client = await DaemonClient.connect(name, address, self.key, self._on_event, deadline)
                except (NetspecError, OSError) as exc:  # no connection opened: none was lost
                    raise Unreachable(name, exc) from exc
                self.clients[name] = client
                self.tg.create_task(client.serve())
                sent = time.time_ns()
                hello = await client.request(m.HELLO, deadline)
                if name == self.plan.clock.reference and hello.now_ns is not None:
                    received = time.time_ns()
                    self.controller_offset = ((sent + received) // 2 - hello.now_ns,
                                              (received - sent) // 2)
                self.rundir.write_json(self.rundir.host_dir(name) / "facts.json", hello.facts)
                self.facts[name] = hello.facts
                self.addresses[name] = self.hosts[name].reachable_at(hello.facts)
                self.rundir.record.hosts[name] = HostRecord("{}:{}".format(*address), hello.pid)
                specs = [c.wire() for c in self.plan.host_components(name)]
                placed = await self.hosts[name].place([c.program for c in specs if c.program is not None])
                components = [msgspec.structs.replace(c, program=placed[c.program]) if c.program is not None
                              else c for c in specs]
                await client.request(m.SETUP, deadline, run=self.rundir.id, host=name,
                                     components=components, join_token=join_token,
                                     streams={s.name: s.wire() for s in self.plan.streams},
                                     camp=self.plan.camp.wire() if self.plan.camp else None,
                                     share=self.share_hosts)
                reached.append(name)
                self.progress(Progress("count", CONNECTING, name, done=len(reached), total=len(names)))

        async def reach_each() -> dict[str, Exception | None]:
            """Every host reached at once, each one's failure kept to be said with the rest's."""
            outcome: dict[str, Exception | None] = {}

            async def one(name: str) -> None:
                try:
                    await reach(name)
                except Exception as exc:
                    outcome[name] = exc
                else:
                    outcome[name] = None
            async with asyncio.TaskGroup() as each:
                for name in names:
                    each.create_task(one(name))
            return {name: outcome[name] for name in names}

        names, reached = list(self.hosts), []
        connect_failed(await self._guard(
            reach_each(), deadline,
            lambda: not_reached({n: ["its setup" if n in self.clients else "netspecd"]
                                for n in names if n not in reached}, connect_s)))
        try:
            tree = await self.fan_out.connect(self.endpoints, deadline)
            clocks = await start_clocks(self.plan.clock, self.clients, self.addresses, self.facts, deadline)
        except DeadlineExceeded as exc:  # what the fleet's reaching left of the deadline ran out
            raise not_reached(exc.waiting, connect_s) from exc
        if tree is not None:
            self.rundir.record.fan_out = FanOutTree(**tree)
            self.progress(Progress("notice", text=f"steps go through a fan-out tree: {len(self.hosts)} "
                                   f"hosts, {tree['width']} children at most, {tree['depth']} levels"))
        if clocks is not None:
            offset, bound = self.controller_offset
            self.rundir.record.clksync = ClockSync(**clocks, controller_offset_ns=offset,
                                                   controller_offset_bound_ns=bound)
            if clocks["interval_ms"] > clocks["asked_interval_ms"]:
                self.progress(Progress("notice", text=stretched(clocks)))
        self.rundir.save()

    # -- steps ------------------------------------------------------------------------

    async def _step(self, index: int, step: Step) -> None:
        loop = asyncio.get_running_loop()
        self.phase = step.phase
        deadline = loop.time() + step.deadline_s
        started = time.time_ns()
        record = StepRecord(step.phase, "running", entered_ns=started)
        self.rundir.record.steps.append(record)
        self.rundir.journal_step(index)  # its start: where a run is, while it runs
        # A step that lasts shows its hosts' acks in run.json as they come, a save a second
        # at most (a short one is in the journal at its end, and saves nothing else).
        self.saves.during(record)
        self.progress(Progress("step", step.phase))
        barrier = None
        try:
            plan = self.step_plans.of(step, self.registered, self.stragglers.ended)
            # In a tree, a step every participant must ack comes back summarized (fanout.py):
            # its hosts' entries reach run.json through the ack journal, not one by one here.
            summarize = self.fan_out.tree is not None and step.need is None
            record.hosts = {} if summarize else {h: StepHost(components={}) for h in plan.participants}
            barrier = self.barrier = Barrier(index, step, plan.participants, plan.count)
            scheduled: dict[str, Any] = {}
            if step.release == "at":
                lead = release.lead_s(step, len(plan.participants))
                record.release = release.planned(lead, self.controller_offset[0])
                scheduled = {"release_ns": record.release.instant_ns}
            sent = self.fan_out.send(plan.enters, {"phase": step.phase, "step": index,
                                                   "deadline_s": step.deadline_s,
                                                   "published": self.published, **scheduled}, summarize)
            if summarize:
                record.sent_ns = sent  # a tree's: one instant for the first level
            else:
                for host, info in record.hosts.items():
                    info.sent_ns = sent if isinstance(sent, int) else sent[host]
            opened = barrier.opened  # who the deadline caught waiting: participants, or files

            def missed() -> DeadlineExceeded:
                waiting = {h: ["files"] for h in self.clients} if opened.done() else barrier.waiting()
                return DeadlineExceeded(step.phase, waiting, step.deadline_s)
            await self._guard(self._through(step, barrier, deadline), deadline, missed)
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
            self.barrier = None  # acks still arriving are recorded, not waited for
            record.left_ns = left = time.time_ns()
            record.duration_s = took = (left - started) / 1e9
            folded = self.folded.pop(index, None)
            if folded is not None:
                record.summarized = Summarized(folded.hosts, folded.acks, folded.slowest)
            record.release = release.skew(record, folded)
            self.rundir.journal_step(index)
        self.progress(Progress("step_done", step.phase, seconds=took, text=release.skew_text(record.release)))

    async def _through(self, step: Step, barrier: Barrier, deadline: float) -> None:
        """A step's work once its enter is sent, in the step's task group (`_guard`): its
        barrier opened; the stragglers of a k-of-n step followed (by the run, until the
        step's deadline); at collect, the fleet's files fetched."""
        await asyncio.shield(barrier.opened)  # others wait on it too: not cancelled with this wait
        if not barrier.complete.done():
            self.stragglers.follow(self.tg, barrier, deadline, lambda: self.barrier)
        if step.phase == "collect":
            await self._collect(deadline)

    async def _end(self, host: str, name: str) -> str | None:
        """End component `name` on `host` now (a straggler at its step's deadline); None if
        it was, else why not."""
        if host not in self.clients:
            return f"host {host} is not connected"
        try:
            await self.clients[host].request(m.END, asyncio.get_running_loop().time() + CLEANUP_DEADLINE_S,
                                             component=name)
        except NetspecError as exc:
            return str(exc)
        return None

    async def _collect(self, deadline: float) -> None:
        self.rundir.close_files()

        def fetched() -> None:
            self.collected = True  # not again at the end, even if a host's files were lost
        await fetch_fleet(self.clients, self.hosts, self.rundir, self.results, self.progress,
                          deadline, fetched)

    # -- events from daemons ------------------------------------------------------------

    def _stranger(self, host: str, event: k.Output | k.Exit | k.Ack) -> ProtocolError | None:
        """What is wrong with who sent the event, if anything (`stranger`); nothing done with
        it here: the caller fails the run (its shape was checked where it was read,
        protocol/kinds.py)."""
        return stranger(host, event.component, getattr(event, "step", None), self.results,
                        len(self.rundir.record.steps))

    def _on_event(self, host: str, event: k.Event | Lost) -> None:
        kind = type(event)
        if (kind in (k.Output, k.Exit, k.Ack)
                and (wrong := self._stranger(host, event)) is not None):  # type: ignore[arg-type]
            self._fail(wrong)  # nothing of it is taken or written
            return
        if type(event) is k.Output:
            self.results[event.component].add_output(event.stream, event.data)
            self.rundir.append_output(host, event.component, event.stream, event.data)
        elif type(event) is k.Ack:
            self._on_ack(host, event)
        elif type(event) is k.Acks:
            try:
                acks, summary = self.fan_out.batch(host, event)
            except ProtocolError as exc:
                self._fail(exc)
                return
            for below, ack in acks:
                if (wrong := self._stranger(below, ack)) is not None:
                    self._fail(wrong)
                else:
                    self._on_ack(below, ack)
            if summary is not None:
                self._on_summary(event.step, summary)
        elif type(event) is k.Exit:
            result = self.results[event.component]
            result.exit_status, result.duration_s = event.returncode, event.duration_s
            result.forced = event.forced  # an older daemon's exit does not say
            self.rundir.record.components[f"{host}/{event.component}"] = ComponentEnd(
                event.returncode, event.duration_s, event.argv, event.ended_ns)
            name = event.component
            if event.failed and name not in self.stragglers.ended and not self._failed_over(host, name):
                self._fail(ComponentFailed(result, self.phase))
        elif type(event) is k.ErrorEvent:
            self._fail(RemoteError(host, event.error))
        elif type(event) is Lost:
            self._fail(ConnectionLost(host, self.phase, event.error.detail))

    def _failed_over(self, host: str, name: str) -> bool:
        """Whether component `name`, whose process just died, was in a k-of-n step it had
        not acked ok (the step under way, or one whose barrier opened without it): then it
        counts as failing there, as a raise does (the run is partial), and leaves the run.
        False where it fails the run: no such step, or one that cannot get through without it."""
        # The earliest such step is the one it died in: its exit may be read once a later
        # step is under way (a barrier opens without it), which it then never reached.
        for barrier in (*self.stragglers.waiting.values(), self.barrier):
            if barrier is None or barrier.step.need is None or name not in barrier.expected.get(host, ()):
                continue
            ack = barrier.acks.get((host, name))
            if ack is not None and ack.status != m.ACK_ERROR:
                continue  # done with that step: it died between phases
            return self.stragglers.died(barrier, host, name, self.results[name].describe_exit(), self.barrier)
        return False

    def _on_ack(self, host: str, ack: k.Ack) -> None:
        name = ack.component
        if ack.phases is not None:
            self.registered[name] = ack.phases
        if ack.published:
            self.published.setdefault(name, {}).update(ack.published)
        step = self.rundir.record.steps[ack.step]
        if ack.clock is not None:
            try:
                self.rundir.record.hosts[host].clock = msgspec.convert(ack.clock, Clock)
            except msgspec.ValidationError as exc:
                self._fail(ProtocolError(f"a clock estimate that is not one ({exc})", f"host {host}"))
                return
        # A summarized step's host that acks as itself gets its entry here (fanout.py).
        sent = step.sent_ns if step.sent_ns is not None else step.entered_ns
        entries = step.hosts.setdefault(host, StepHost(components={}, sent_ns=sent)).components
        before = entries.get(name)
        if before is not None and (before.outcome == "killed" or before.died):
            return  # the error ack of its ending, or of its death, says nothing new
        if name in self.stragglers.ended:
            entries[name] = Entry(ack.status, self.stragglers.ended[name], outcome="skipped")
            return
        entries[name] = entry = Entry(**acksummary.entry(ack), received_ns=time.time_ns(),
                                      traceback=ack.traceback or "")
        barrier = self.barrier
        if barrier is None or barrier.index != ack.step:
            if (not self.stragglers.late_ack(ack.step, host, name, ack) and self.failure.done()
                    and ack.status == m.ACK_ERROR):
                # Still in the step when the run failed, and ended with it: not a cause.
                entry.outcome = "ended"
            return
        if not barrier.add(host, name, ack):
            self._fail(ack_failure(self.results, host, name, barrier.step.phase, ack))
        entry.outcome = "error" if ack.status == m.ACK_ERROR else "ok"
        if ack.status == m.ACK_ERROR and not self.failure.done():
            # k of n: the barrier can open without it, but the run is not ok.
            self.stragglers.trouble(barrier.step.phase, host, name, ack.message or "error")
        if barrier.host_done(host):
            acks = barrier.by_host.get(host, [])
            worst = m.worst_status(a.status for _, a in acks)
            part = step.hosts[host]
            began = release.began_ns(step, part.sent_ns)
            part.done_ns = now = time.time_ns()
            self.progress(Progress("host", barrier.step.phase, host, worst, (now - began) / 1e9,
                                   "; ".join(f"{c}: {a.message}" for c, a in acks if a.message)))

    def _on_summary(self, index: int, summary: k.Summary) -> None:
        """Acks a fan-out tree folded, each ok: their records go to the ack journal unread,
        their count to the barrier, their slowest hosts to the live line."""
        records, compressed = summary.records, summary.zlib
        self.rundir.journal_acks(index, time.time_ns(), records, compressed)
        self.folded.setdefault(index, AckSummary()).merge(summary, keep_records=False)
        barrier = self.barrier
        if barrier is not None and barrier.index == index:
            barrier.add_folded(summary.acks, records, compressed)
        self.progress(Progress("hosts", self.rundir.record.steps[index].phase, done=summary.hosts,
                               slowest=tuple((took / 1e9, host) for took, host in summary.slowest)))

    # -- the end ------------------------------------------------------------------------

    async def _best_effort(self, what: Callable[[DaemonClient], Awaitable[Any]],
                           seconds: float) -> None:
        """Do `what` on every connected host; give up quietly after `seconds`."""
        async def one(client: DaemonClient) -> None:
            with contextlib.suppress(NetspecError, OSError):
                await what(client)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await asyncio.gather(*(one(c) for c in self.clients.values()))

    def _unclean_ends(self) -> list[tuple[str, str, str]]:
        """Each component that did not end cleanly (an exit status neither 0 nor the
        SIGTERM netspec sent it), which nothing has said yet: one netspec ended mid-run
        is a trouble already. A component its daemon killed because it would not end when
        asked is one of them: a run is ok only if every component ended cleanly. Each is
        (host, what it says but for the host's names, what it says), for `said_once`."""
        said = []
        for name, result in self.results.items():
            if result.exit_status is None or result.ok or name in self.stragglers.ended:
                continue
            forced = " (it did not end when asked, so netspec killed it)" if result.forced else ""
            text = f"host {result.host}: {name}: {describe_returncode(result.exit_status)} at its end{forced}"
            said.append((result.host, without_names(text, [result.host, name]), text))
        return said

    async def _finish(self, error: NetspecError | None) -> None:
        loop = asyncio.get_running_loop()
        await self.stragglers.run_ended(CLEANUP_DEADLINE_S)
        if error is not None:
            await self._best_effort(lambda c: c.request(m.RESET, loop.time() + 15, clean=False), 20)
            if not self.collected:
                # Every request of the collect honours this deadline: a best effort.
                with contextlib.suppress(NetspecError):
                    await self._collect(loop.time() + CLEANUP_DEADLINE_S)
        await self._best_effort(lambda c: c.request(m.RESET, loop.time() + 15, clean=True), 20)
        for client in self.clients.values():
            await client.close()
        await asyncio.gather(*(h.stop(self.rundir.id) for h in self.hosts.values()),
                             return_exceptions=True)
        if any(isinstance(h, LocalHost) for h in self.hosts.values()):
            # A local daemon that died hard (SIGKILL, OOM) could not reset its run; this
            # machine is its host, so what it left behind is ours to end: one scan of the
            # machine's processes for the whole fleet.
            await asyncio.to_thread(kill_run_processes, self.rundir.id, [], signal.SIGKILL)
        await self.forks.close()
        if self.failure.done():
            self.failure.exception()
        self.saves.cancel()
        unclean = self._unclean_ends() if error is None else []
        self.rundir.finish(RunOutcome.ended(error, self.phase, self.stragglers.troubles, unclean))


def stranger(host: str, component: str, step: int | None, results: Mapping[str, ComponentResult],
             steps_sent: int) -> ProtocolError | None:
    """Whether an event `host` sent of `component` (of `step`, if it names one) could be its:
    the error that says why not, None if it could. A check only; the caller decides.

    Args:
        host: the host whose connection the event came on (or whose ack a relay passed up).
        component: the component the event names; the node itself (`m.NODE`) acks steps too.
        step: the step the event names, None for an event of no step (output, exit).
        results: every component of the run by name, each with the host that runs it.
        steps_sent: how many steps were sent so far (steps 0 to steps_sent - 1).

    Returns:
        A ProtocolError naming the host, when the component is not one `host` runs or the
        step was never sent; None otherwise.
    """
    result = results.get(component)
    if not ((result is not None and result.host == host) or (component == m.NODE and step is not None)):
        return ProtocolError(f"an event of component '{component}', which it does not run", f"host {host}")
    if step is not None and step >= steps_sent:
        return ProtocolError(f"an ack of step {step}, which was never sent", f"host {host}")
    return None
