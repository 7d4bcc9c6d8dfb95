"""The experiment's faults on this host: each done at its instant on this host's clock (the
reference clock's instant converted as a `release: at` step's is, daemon/release.py), its
effect observed on the machine, logged in this host's `faults` stream (so it lands on the
global timeline with its clock bound) and reported to the controller (`FaultDone`).

A component's fault signals its process group and every descendant: kill (SIGKILL) and
terminate (SIGTERM) mark it ended by the schedule first (its end is then "killed by
schedule", protocol/exits.py), and their effect is its process seen gone from /proc; restart
kills it so, then starts it again (a process of its own, its output appended); start (and a
restart of one already ended) starts again one that ended, its effect the instant it runs; pause
(SIGSTOP) and resume (SIGCONT) are seen in /proc/PID/stat's state. A pressure on the host
(cpu, memory, disk) runs in processes of its own, spawned and reaped by daemon/pressure.py,
what each did measured from what the kernel says of it. A partition or heal
(daemon/partitions.py) is the
run's link conditions toward one peer (netspec.links, the run's `LinkSet`): its effect, the
first packet the partition's rule dropped, from the rule's own counter; a heal's, the first
packet out toward the peer after it (a rule that counts them). A fault that lasts is reported
once done and again at its end (`FaultDone.final`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
from netspec.camp.procfs import stat_fields
from netspec.datastream.instrument import Datastreams
from netspec.datastream.writer import StreamConfig, StreamInfo
from netspec.links import Refused
from netspec.links.kernel import ToolFailed
from netspec.links.nfqueue import QueueError
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.errors import NetspecError
from netspec.protocol.exits import describe_returncode, signal_pids

from . import release
from .componentchannel import ComponentExited
from .partitions import Partitions
from .pressure import PRESSURE_GRACE_S, Pressures

if TYPE_CHECKING:
    from .component import ComponentProcess, Outbox
    from .services import NodeServices

log = logging.getLogger("netspecd")

FAULT_STREAM = "faults"
SEEN_WITHIN_S = 2.0  # how long an effect (an exit, a state in /proc) is looked for
LOOKERS = 8  # effects looked for at once, each in a thread of its own
# A fault's last WAIT_THREAD_S before its instant are slept in a thread of the faults' own
# (daemon/release.py), at most WAITERS at once. In the loop's default pool, with the 1 s a
# step's release sleeps there, a dozen faults within a second filled its 6 threads, and a
# partition's nft change queued behind the sleeps of later faults: 0.5-1.1 s late.
WAIT_THREAD_S = 0.05
WAITERS = 16
LOOK_EVERY_S = 0.0002  # how often /proc is read meanwhile: the effect's instant to this
TERMINATED_WITHIN_S = 5.0  # a terminated component's end is waited for this long
KILL_DAEMON_DRAIN_S = 0.1  # how long a daemon about to be killed gives its report to leave


class RunHere(Protocol):
    """What the faults take of the run on this host (daemon/supervisor.py's `Supervisor`, which
    owns them: named by what they use, so that neither module imports the other)."""

    run_id: str
    host: str
    root: Path
    tg: asyncio.TaskGroup
    components: dict[str, ComponentProcess]
    services: NodeServices
    outbox: Outbox

    def logging_for(self, name: str) -> dict[str, Any]: ...


class Faults:
    """The faults of one run on this host. Lifecycle: made with the run's supervisor;
    `schedule` for each fault the controller sends (its task in the run's task group);
    `close` at reset: every fault still waiting is cancelled, every pressure's process
    killed and its files removed, the stream closed."""

    def __init__(self, sup: RunHere):
        self.sup = sup
        self.tasks: set[asyncio.Task[None]] = set()
        self.streams: Datastreams | None = None
        self.stream_closed = False  # at collect: a fault done after is reported, not logged
        # Shut at `close`: where effects are looked for in /proc, each for SEEN_WITHIN_S at
        # most; where faults sleep until their instants.
        self.pool = ThreadPoolExecutor(max_workers=LOOKERS, thread_name_prefix="netspecd-faults")
        self.waits = ThreadPoolExecutor(max_workers=WAITERS, thread_name_prefix="netspecd-fault-waits")
        self.partitions = Partitions(lambda tcp, udp: sup.services.link_set(tcp, udp), self._so_far,
                                     SEEN_WITHIN_S)
        self.pressures = Pressures(sup.run_id, sup.host, sup.root / "faults")

    def schedule(self, request: k.Fault) -> None:
        """Do `request` at its instant, in the run's task group.

        Raises:
            NetspecError: it names a component this host does not run.
        """
        if request.component is not None and request.component not in self.sup.components:
            raise NetspecError(f"unknown component {request.component!r}")
        task = self.sup.tg.create_task(self._run(request))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def close_stream(self) -> None:
        """Close the faults stream (at collect, before the run's files are listed): a fault
        done after it is reported, but not in the stream."""
        if self.streams is not None and not self.stream_closed:
            self.streams.stop()
        self.stream_closed = True

    async def close(self) -> None:
        # Killed before their tasks end: a task's end lets go of its pids (the reset's reaper
        # of orphans, orphans.reap_adopted, reaps what is left).
        self.pressures.kill()
        for task in list(self.tasks):
            task.cancel()
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=PRESSURE_GRACE_S)
        for pool in (self.pool, self.waits):  # a look or a wait still going ends by its bound
            pool.shutdown(wait=False, cancel_futures=True)
        self.partitions.close()
        self.pressures.remove_files()
        self.close_stream()

    async def _run(self, request: k.Fault) -> None:
        at, said = release.local_instant(self.sup.services.clock, request.at_ns)
        est = self.sup.services.clock.estimate(at)
        target = request.component or (request.rule.peer if request.rule is not None else self.sup.host)
        report = k.FaultDone(index=request.index, kind=request.fault, target=target, at_ns=at,
                             offset_ns=None if est is None else est.offset_ns,
                             bound_ns=said.get("bound_ns"), unsynchronised=said.get("unsynchronised", False),
                             missed_ns=said["missed_ns"])
        await release.wait_until(at, WAIT_THREAD_S, self.waits)
        report.done_ns = time.time_ns()
        try:
            if request.component is not None:
                await self._component(request, self.sup.components[request.component], report)
            elif request.rule is not None:
                await self.partitions.apply(request, request.rule, report)
            elif request.fault == "kill_daemon":
                await self._kill_daemon(report)
            else:
                await self.pressures.apply(request, report, self._so_far)
        except (OSError, Refused, ToolFailed, QueueError) as exc:
            # a pressure's process or file, or a link's rule, could not be made: said, not the run's end
            report.error = f"{request.fault}: {exc}"
        except Exception as exc:  # a fault of netspecd's own: said in the report, not a dead session
            log.exception("run %s: fault %d", self.sup.run_id, request.index)
            report.error = f"{request.fault}: netspecd: {type(exc).__name__}: {exc}"
        self._log(report)
        log.info("run %s: fault %d %s %s: %s%s", self.sup.run_id, request.index, request.fault, target,
                 report.effect, f" ({report.error})" if report.error else "")
        self.sup.outbox.emit(report)

    def _so_far(self, report: k.FaultDone) -> None:
        """A lasting fault's report once done, before its end: the run may end before that
        (its end reported, if it comes, by the final one)."""
        self.sup.outbox.emit(msgspec.structs.replace(report, final=False, measured=dict(report.measured)))

    async def _component(self, request: k.Fault, comp: ComponentProcess, report: k.FaultDone) -> None:
        kind = request.fault
        if comp.proc is None:
            report.error = f"component {comp.spec.name} was not running (not started yet)"
            return
        if kind == "start" or (kind == "restart" and comp.exited.done()):
            await self._start_again(comp, report)
            return
        if comp.exited.done():
            report.error = f"component {comp.spec.name} was not running (it {_end(comp)})"
            return
        pid = comp.proc.pid
        if kind in ("kill", "terminate", "restart"):
            comp.scheduled = True  # its end is this fault's effect (protocol/exits.py)
            sig = signal.SIGTERM if kind == "terminate" else signal.SIGKILL
            _signal(comp, sig)
            if comp.paused and sig == signal.SIGTERM:
                _signal(comp, signal.SIGCONT)  # a stopped process takes no SIGTERM until then
            within = SEEN_WITHIN_S if kind == "kill" else TERMINATED_WITHIN_S
            report.effect_ns = await self._look(pid, _gone, within)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within):
                    await asyncio.shield(comp.exited)
            report.effect = (f"it {_end(comp)}" if comp.exited.done()
                             else f"it was not seen to end within {within:g} s")
            if comp.exited.done():  # its exit as the daemon saw it, if that came before /proc's
                seen = comp.exited.result()["ended_ns"]
                report.effect_ns = seen if report.effect_ns is None else min(report.effect_ns, seen)
            if report.effect_ns is None:
                report.error = f"not seen to end within {within:g} s of its {sig.name}"
            elif kind == "restart":
                report.ended_ns = await self._restart(comp, report)
            return
        stop = kind == "pause"
        _signal(comp, signal.SIGSTOP if stop else signal.SIGCONT)
        comp.paused = stop
        report.effect_ns = await self._look(pid, _stopped if stop else _running, SEEN_WITHIN_S)
        report.effect = "seen stopped (T) in /proc" if stop else "seen running again in /proc"
        if report.effect_ns is None:
            report.effect, report.error = "", f"not seen {'stopped' if stop else 'resumed'} in /proc " \
                f"within {SEEN_WITHIN_S:g} s"
        if stop and request.for_s is not None:
            self._so_far(report)
            await asyncio.sleep(max(0.0, report.done_ns / 1e9 + request.for_s - time.time_ns() / 1e9))
            if not comp.exited.done():
                _signal(comp, signal.SIGCONT)
                comp.paused = False
                report.ended_ns = await self._look(pid, _running, SEEN_WITHIN_S)

    async def _look(self, pid: int, wanted: Any, within: float) -> int | None:
        """`_seen` in a thread of the faults' own pool: its polls hold up no fault's wait
        for its instant, nor a change of the links."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, _seen, pid, wanted, within)

    async def _kill_daemon(self, report: k.FaultDone) -> None:
        """This daemon killed (SIGKILL, nothing of it cleaned up), after its report and the
        faults stream's record (flushed and closed first) had their chance to leave: the
        controller takes its lost connection for the effect. Its components get the SIGTERM
        a dying daemon leaves them (daemon/spawn.py)."""
        report.effect = f"SIGKILL to netspecd (pid {os.getpid()})"
        self._log(report)
        self.close_stream()
        self.sup.outbox.emit(report)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(KILL_DAEMON_DRAIN_S):
                await self.sup.outbox.drain()
        log.warning("run %s: fault %d: netspecd killed by the schedule", self.sup.run_id, report.index)
        os.kill(os.getpid(), signal.SIGKILL)

    async def _start_again(self, comp: ComponentProcess, report: k.FaultDone) -> None:
        """A `start` (or a `restart` of what had already ended): the component, ended by an
        earlier fault or by itself, started again; its effect is the instant it runs (an aware
        one: registered). One running is refused, as is one its stop phase ended: the run's
        own end of it stands."""
        assert comp.proc is not None
        if not comp.exited.done():
            report.error = f"component {comp.spec.name} is running (pid {comp.proc.pid}): a start is " \
                           "for one that ended (a restart ends it first)"
            return
        if comp.stopping and not comp.scheduled:
            report.error = f"component {comp.spec.name} was stopped by the run (it {_end(comp)}): " \
                           "not started again"
            return
        report.effect = f"it had ended ({_end(comp)})"
        report.effect_ns = await self._restart(comp, report)

    async def _restart(self, comp: ComponentProcess, report: k.FaultDone) -> int:
        """Start the ended component again; an aware one is waited for until it registers
        (SEEN_WITHIN_S), and given the logging window if one is open. The instant it ran
        again: its process's start, an aware one's registration."""
        await comp.restart(self.sup.tg)
        assert comp.proc is not None
        self.sup.services.started(comp.spec.name, comp.proc.pid)
        up_ns = comp.started_ns
        again = f"started again as pid {comp.proc.pid}"
        if comp.spec.aware:
            try:
                async with asyncio.timeout(SEEN_WITHIN_S):
                    await comp.registered
                up_ns = time.time_ns()
                if not self.sup.services.streams.paused:  # in a logging window: it logs too
                    await comp.call(m.START_LOGGING, {}, {}, logging=self.sup.logging_for(comp.spec.name))
            except (TimeoutError, ComponentExited) as exc:
                report.error = f"{again}, but it did not register within {SEEN_WITHIN_S:g} s ({exc})"
        report.effect = f"{report.effect}; {again}"
        return up_ns

    def claimed(self, component: str, role: str, held: bool, at_ns: int) -> None:
        """`component` claimed `role` (or let it go) at `at_ns`: in the faults stream (the
        instant a role changed hands, on the timeline), and to the controller, which aims a
        fault of the role at its holder."""
        est = self.sup.services.clock.estimate(at_ns)
        if self._stream() is not None:
            self._role.log(0, {"component": component, "role": role, "held": held}, lambda: at_ns)
        self.sup.outbox.emit(k.Claimed(component=component, role=role, held=held, at_ns=at_ns,
                                       offset_ns=None if est is None else est.offset_ns,
                                       bound_ns=None if est is None else est.bound_ns,
                                       unsynchronised=est is None))

    def _stream(self) -> Datastreams | None:
        """This host's `faults` stream, opened at its first record; None once closed."""
        if self.stream_closed:
            return None
        if self.streams is None:
            self.streams = Datastreams()
            self._event = self.streams.event("FAULTS", "fault", "a fault of the schedule, done on this host")
            self._instants = {
                "effect": self.streams.event("FAULTS", "effect", "a fault's effect seen on this host"),
                "ended": self.streams.event("FAULTS", "ended", "a lasting fault's end: a timed partition's "
                                            "or pause's, a pressure's, a restart's start again"),
                "through": self.streams.event("FAULTS", "through", "a timed partition's first packet "
                                              "through after its end")}
            self._role = self.streams.event("FAULTS", "role", "a component's claim of a role, or its "
                                            "letting go (nodelib.claim)")
            info = StreamInfo(self.sup.services.directory, run=self.sup.run_id, host=self.sup.host,
                              component=FAULT_STREAM)
            self.streams.start([StreamConfig(FAULT_STREAM, enable=("FAULTS",))], info, exit_hooks=False)
        return self.streams

    def _log(self, report: k.FaultDone) -> None:
        """The fault in this host's `faults` stream (opened at its first record), at the
        instant it was done, and its effect, end and first packet through after it at
        theirs."""
        if self._stream() is None:
            return
        done = report.done_ns

        def at_done() -> int:
            return done if done is not None else time.time_ns()
        self._event.log(report.index, {"kind": report.kind, "target": report.target, "effect": report.effect,
                                       "effect_ns": report.effect_ns, "error": report.error}, at_done)
        # its later instants, each an event of its own on the timeline (with its bound there)
        later = (("effect", report.effect_ns), ("ended", report.ended_ns), ("through", report.through_ns))
        for name, at in later:
            if at is not None:
                self._instants[name].log(report.index, {"kind": report.kind, "target": report.target},
                                         lambda at=at: at)


def _signal(comp: ComponentProcess, sig: signal.Signals) -> None:
    """`sig` to the component's process group and every descendant it has."""
    pids = comp.pids()
    comp.signal_group(sig)
    signal_pids(pids[1:], sig)  # its descendants that left its group


def _end(comp: ComponentProcess) -> str:
    return describe_returncode(comp.exited.result()["returncode"])


def _state(pid: int) -> str | None:
    """Process `pid`'s state letter in /proc (R, S, D, T, Z...); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return stat_fields(f.read())[0].decode()
    except (OSError, IndexError, ValueError):
        return None


def _gone(state: str | None) -> bool:
    return state in ("Z", "X", None)


def _stopped(state: str | None) -> bool:
    return state == "T"


def _running(state: str | None) -> bool:
    return state != "T"


def _seen(pid: int, wanted: Any, within: float) -> int | None:
    """When process `pid`'s state in /proc was first seen to satisfy `wanted`, looked at
    every LOOK_EVERY_S for `within` seconds (a thread: not on the loop); None if never."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if wanted(_state(pid)):
            return time.time_ns()
        time.sleep(LOOK_EVERY_S)
    return None
