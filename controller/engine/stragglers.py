"""The participants a k-of-n barrier opened without: each acks by its step's deadline (late)
or is ended then (killed) and takes no part in the rest of the run. Every such outcome, and
every error a k-of-n barrier let through, is a trouble: a run with troubles is partial."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from netspec.protocol import messages as m
from netspec.protocol.kinds import Ack
from netspec.protocol.outcome import Outcome
from netspec.protocol.runrecord import Entry, RunRecord

from ..record.progress import Progress, ProgressSink
from .barrier import Barrier


class Stragglers:
    """Owned by a Run: `record` is its run.json, `save` saves it soon, `end(host, name)`
    asks a daemon to end a component now (None if it did, else why not).

    Lifecycle: the run enters it (`async with`), which opens the task group its watches
    run in (one per k-of-n step with participants still out); `run_ended` ends that group,
    waiting for the watches until its timeout and cancelling what is left then; leaving
    the `async with` ends it too, should the run not have got that far. Enter and end it
    from one task (a TaskGroup's rule)."""

    def __init__(self, record: RunRecord, progress: ProgressSink, save: Callable[[], None],
                 end: Callable[[str, str], Awaitable[str | None]]):
        self.record, self.progress, self.save, self.end = record, progress, save, end
        self.waiting: dict[int, Barrier] = {}  # by step index
        # Every k-of-n step's barrier by index, kept after its step (Steps.step): a death is
        # judged in the step its daemon says it ended in, however late its report comes.
        self.kofn: dict[int, Barrier] = {}
        self._watches: asyncio.TaskGroup | None = None  # open from `async with` to `run_ended`
        self.ended: dict[str, str] = {}  # component -> why netspec ended it mid-run
        self.troubles: list[str] = []

    def trouble(self, phase: str, host: str, name: str, text: str) -> None:
        self.troubles.append(f"phase '{phase}', host {host}: {name}: {text}")

    async def __aenter__(self) -> Stragglers:
        self._watches = asyncio.TaskGroup()
        await self._watches.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._end_watches(*exc)

    async def _end_watches(self, *exc: object) -> None:
        watches, self._watches = self._watches, None
        if watches is not None:
            await watches.__aexit__(*exc)

    def follow(self, barrier: Barrier, deadline: float, current: Callable[[], Barrier | None]) -> None:
        """From now on a late ack of `barrier`'s step is recorded as such (at once, before
        any other task runs); a watch in this object's task group ends the ones still out
        at the step's deadline.

        Raises:
            RuntimeError: not entered (`async with`), or the run has ended (`run_ended`).
        """
        if self._watches is None:
            raise RuntimeError("stragglers followed outside the run (enter Stragglers first)")
        self.waiting[barrier.index] = barrier
        self._watches.create_task(self._watch(barrier, deadline, current))

    async def _watch(self, barrier: Barrier, deadline: float, current: Callable[[], Barrier | None]) -> None:
        """Until the step's deadline; then each one still out is ended. `current` is the
        barrier of the step under way, which stops waiting for an ended component too."""
        timeout = max(deadline - asyncio.get_running_loop().time(), 0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(barrier.complete), timeout)
        self.waiting.pop(barrier.index, None)
        for host, names in barrier.waiting().items():
            for name in names:
                self.give_up(barrier, host, name, f"no ack within the deadline of "
                             f"{barrier.step.deadline_s:g} s: ended", current())
                if name != m.NODE and (why_not := await self.end(host, name)) is not None:
                    # Said, not hidden: reset at the end of the run still ends it.
                    self.trouble(barrier.step.phase, host, name,
                                 f"could not be ended at the deadline: {why_not}")

    def give_up(self, barrier: Barrier, host: str, name: str, why: str,
                current: Barrier | None = None) -> None:
        """Participant `name` on `host` will not ack: recorded in its step, in the troubles
        and live; a component is out of the rest of the run."""
        barrier.give_up(host, name)
        phase = barrier.step.phase
        entry = self._entry(barrier.index, host, name)
        entry.status, entry.outcome, entry.message = m.ACK_ERROR, Outcome.KILLED, why
        if name != m.NODE:
            self.ended[name] = f"ended in phase '{phase}': {why}"
            for later in [current, *self.waiting.values()]:
                if later is not None and later is not barrier:
                    later.drop(host, name)
        self.trouble(phase, host, name, why)
        self.progress(Progress("outcome", phase, host, Outcome.KILLED, text=f"{name}: {why}"))
        self.save()

    def died(self, barrier: Barrier, host: str, name: str, why: str, current: Barrier | None) -> bool:
        """Component `name` on `host`, a participant of k-of-n `barrier`, died before it
        acked (or as it acked an error): it fails there as a raise would, said on its own
        line, and is out of the rest of the run. False if the step cannot get through
        without it (the run fails)."""
        acked = (host, name) in barrier.acks  # its error ack came first: already a trouble
        if not acked and not barrier.add(host, name, barrier.stand_in(name, why)):
            return False
        phase = barrier.step.phase
        entry = self._entry(barrier.index, host, name)
        entry.status, entry.outcome, entry.died = m.ACK_ERROR, "error", True
        entry.message = entry.message or why
        self.ended[name] = f"ended in phase '{phase}': {why}"
        for later in [current, *self.waiting.values()]:
            if later is not None and later is not barrier:
                later.drop(host, name)
        if not acked:
            self.trouble(phase, host, name, why)
        self.progress(Progress("outcome", phase, host, "died", text=f"{name} died: {why}"))
        self.save()
        return True

    def late_ack(self, index: int, host: str, name: str, ack: Ack) -> bool:
        """An ack of a step whose barrier opened before it: recorded with how late it came.
        False if no k-of-n step of that index waits for it."""
        barrier = self.waiting.get(index)
        if barrier is None or (host, name) in barrier.acks:
            return False
        barrier.add(host, name, ack)
        entry = self._entry(index, host, name)
        entry.late_ns = late = (entry.received_ns or 0) - barrier.opened_ns
        failed = ack.status == m.ACK_ERROR
        entry.outcome = Outcome.ERROR if failed else Outcome.LATE
        late_s = late / 1e9
        text = f"{name}: {'failed' if failed else 'acked'} {late_s:.3f} s after the barrier opened"
        if failed:
            self.trouble(barrier.step.phase, host, name, ack.message or "error")
            text += f": {ack.message or 'error'}"
        self.progress(Progress("outcome", barrier.step.phase, host, entry.outcome, late_s, text))
        self.save()
        return True

    def _entry(self, index: int, host: str, name: str) -> Entry:
        """Participant `name`'s entry in step `index` of the record, made if it has none yet."""
        return self.record.steps[index].hosts[host].components.setdefault(name, Entry())

    async def run_ended(self, timeout: float) -> None:
        """The run is over: whoever is still out never acked. Returns once every straggler
        being ended has been (or `timeout` passed), so that the daemons are not hung up on
        while they answer."""
        for barrier in list(self.waiting.values()):
            for host, names in barrier.waiting().items():
                for name in names:
                    self.give_up(barrier, host, name, "the run ended before it acked")
        # The group ended here: each watch awaited, until `timeout`; then (the wait cancelled
        # by the timeout) the group cancels the watches left and waits for them.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._end_watches(None, None, None)
