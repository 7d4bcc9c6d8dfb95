"""What a run's daemons send it between requests: output, exits, acks (one by one, or
batched and summarized by a fan-out tree), errors and lost connections. Each is checked
against who sent it, recorded, and told to the step under way; what cannot be let through
fails the run."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netspec.protocol import acksummary
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.acksummary import AckSummary
from netspec.protocol.errors import ComponentFailed, ConnectionLost, ProtocolError, RemoteError
from netspec.protocol.exits import ending_told
from netspec.protocol.outcome import Outcome
from netspec.protocol.runrecord import ComponentEnd, Entry, StepHost

from ..hosts.fleet import Lost
from ..record.progress import Progress, ProgressSink
from ..record.results import ComponentResult
from ..record.rundir import RunDir
from . import release
from .barrier import Barrier
from .failures import ack_failure
from .fanout import FanOut
from .guard import Failure
from .stragglers import Stragglers


@dataclass(slots=True)
class Underway:
    """The step under way, which the run's events read: its phase ("" before the first
    step, while connecting) and its barrier (None between steps: acks still arriving then
    are recorded, not waited for). Written by `Steps.step` (step.py) alone."""

    phase: str = ""
    barrier: Barrier | None = None


class Inbox:
    """A run's events, as its connections' readers deliver them (`on_event`, the handler
    each DaemonClient is given). Owned by a Run, with the parts of it an event reads and
    writes; holds what the acks told that the steps read: each component's registered
    phases, what each published, and the acks a fan-out tree summarized, by step."""

    def __init__(self, results: dict[str, ComponentResult], rundir: RunDir, fan_out: FanOut,
                 stragglers: Stragglers, now: Underway, failure: Failure, progress: ProgressSink):
        self.results, self.rundir, self.fan_out, self.stragglers = results, rundir, fan_out, stragglers
        self.now, self.failure, self.progress = now, failure, progress
        self.registered: dict[str, list[str]] = {}
        self.published: dict[str, dict[str, Any]] = {}
        self.folded: dict[int, AckSummary] = {}  # step -> the acks summarized for it so far

    def stranger(self, host: str, event: k.Output | k.Exit | k.Ack) -> ProtocolError | None:
        """What is wrong with who sent the event, if anything (`stranger`); nothing done with
        it here: the caller fails the run (its shape was checked where it was read,
        protocol/kinds.py)."""
        return stranger(host, event.component, getattr(event, "step", None), self.results,
                        len(self.rundir.record.steps))

    def on_event(self, host: str, event: k.Event | Lost) -> None:
        """One event from `host`'s connection, taken in or, if it cannot be, failing the run."""
        kind = type(event)
        if (kind in (k.Output, k.Exit, k.Ack)
                and (wrong := self.stranger(host, event)) is not None):  # type: ignore[arg-type]
            self.failure.set(wrong)  # nothing of it is taken or written
            return
        if type(event) is k.Output:
            self.results[event.component].add_output(event.stream, event.data)
            self.rundir.append_output(host, event.component, event.stream, event.data)
        elif type(event) is k.Ack:
            self.on_ack(host, event)
        elif type(event) is k.Acks:
            try:
                acks, summary = self.fan_out.batch(host, event)
            except ProtocolError as exc:
                self.failure.set(exc)
                return
            for below, ack in acks:
                if (wrong := self.stranger(below, ack)) is not None:
                    self.failure.set(wrong)
                else:
                    self.on_ack(below, ack)
            if summary is not None:
                self.on_summary(event.step, summary)
        elif type(event) is k.Exit:
            result = self.results[event.component]
            result.exit_status, result.duration_s = event.returncode, event.duration_s
            result.forced = event.forced  # an older daemon's exit does not say
            result.ending = ending_told(event.expected, event.failed, event.scheduled)
            self.rundir.record.components[f"{host}/{event.component}"] = ComponentEnd(
                event.returncode, event.duration_s, event.argv, event.ended_ns, event.scheduled, event.failed,
                event.step)
            name = event.component
            if (event.failed and name not in self.stragglers.ended
                    and not self.failed_over(host, name, event.step)):
                self.failure.set(ComponentFailed(result, self.now.phase))
        elif type(event) is k.ErrorEvent:
            self.failure.set(RemoteError(host, event.error))
        elif type(event) is Lost:
            self.failure.set(ConnectionLost(host, self.now.phase, event.error.detail))

    def failed_over(self, host: str, name: str, step: int | None = None, why: str = "") -> bool:
        """Whether component `name`, whose process just died (in step `step`, if its daemon
        said), was in a k-of-n step it had not acked ok (the step under way, or one whose
        barrier opened without it): then it counts as failing there, as a raise does (the run
        is partial), and leaves the run. False where it fails the run: no such step, or one
        that cannot get through without it. `why` says its end, where its exit is not read yet."""
        current = self.now.barrier
        if step is not None:
            # The step it ended in, however late its exit is read: a later step may be under
            # way, and its own error ack (through a fan-out tree) may have completed that
            # step's barrier first. Its end is that step's, whatever came first.
            candidates: tuple[Barrier | None, ...] = (self.stragglers.kofn.get(step),)
        else:
            # An older daemon's exit: the earliest such step is the one it died in (its exit
            # may be read once a later step is under way, which it then never reached).
            candidates = (*self.stragglers.waiting.values(), current)
        for barrier in candidates:
            if barrier is None or barrier.step.need is None or name not in barrier.expected.get(host, ()):
                continue
            ack = barrier.acks.get((host, name))
            if ack is not None and ack.status != m.ACK_ERROR:
                continue  # done with that step: it died between phases
            why = why or self.results[name].describe_exit()
            return self.stragglers.died(barrier, host, name, why, current)
        return False

    def on_ack(self, host: str, ack: k.Ack) -> None:
        """One participant's ack of a step: recorded in the step's record, and told to the
        barrier of the step under way (or to the stragglers, if it is a late one)."""
        name = ack.component
        if ack.phases is not None:
            self.registered[name] = ack.phases
        if ack.published:
            self.published.setdefault(name, {}).update(ack.published)
        step = self.rundir.record.steps[ack.step]
        if ack.clock is not None:
            self.rundir.record.hosts[host].clock = ack.clock
        # A summarized step's host that acks as itself gets its entry here (fanout.py).
        sent = step.sent_ns if step.sent_ns is not None else step.entered_ns
        entries = step.hosts.setdefault(host, StepHost(components={}, sent_ns=sent)).components
        before = entries.get(name)
        if before is not None and (before.outcome == Outcome.KILLED or before.died):
            return  # the error ack of its ending, or of its death, says nothing new
        if ack.ended_in is not None and ack.status == m.ACK_ERROR and name not in self.stragglers.ended:
            # It had ended in that earlier step, its exit not read yet (a fan-out tree's acks
            # come by another road): judged there, as its exit will be.
            self.failed_over(host, name, ack.ended_in, ack.message)
        if name in self.stragglers.ended:
            entries[name] = Entry(ack.status, self.stragglers.ended[name], outcome=Outcome.SKIPPED)
            return
        entries[name] = entry = Entry(**acksummary.entry(ack), received_ns=time.time_ns(),
                                      traceback=ack.traceback or "")
        barrier = self.now.barrier
        if barrier is None or barrier.index != ack.step:
            if (not self.stragglers.late_ack(ack.step, host, name, ack) and self.failure.done()
                    and ack.status == m.ACK_ERROR):
                # Still in the step when the run failed, and ended with it: not a cause.
                entry.outcome = Outcome.ENDED
            return
        if ack.scheduled:
            # Killed by the schedule's fault: out of the step, neither an ack toward its need
            # nor its failure (a need the step can no longer meet fails it, NeedOutOfReach).
            barrier.drop(host, name)
        elif not barrier.add(host, name, ack):
            self.failure.set(ack_failure(self.results, host, name, barrier.step.phase, ack))
        entry.outcome = (Outcome.ERROR if ack.status == m.ACK_ERROR else Outcome.SCHEDULED if ack.scheduled
                         else Outcome.OK)
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

    def on_summary(self, index: int, summary: k.Summary) -> None:
        """Acks a fan-out tree folded, each ok: their records go to the ack journal unread,
        their count to the barrier, their slowest hosts to the live line."""
        records, compressed = summary.records, summary.zlib
        self.rundir.journal_acks(index, time.time_ns(), records, compressed)
        self.folded.setdefault(index, AckSummary()).merge(summary, keep_records=False)
        barrier = self.now.barrier
        if barrier is not None and barrier.index == index:
            barrier.add_folded(summary.acks, records, compressed)
        self.progress(Progress("hosts", self.rundir.record.steps[index].phase, done=summary.hosts,
                               slowest=tuple((took / 1e9, host) for took, host in summary.slowest)))


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
