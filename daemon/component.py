"""One component of a run on this host: its process, spawned once, watched and stopped.

Each component runs in its own process group with stdout/stderr captured to files and
streamed to the controller. NETSPEC-aware components get one end of a socketpair (its fd
named by NETSPEC_FD); plain commands are started at one phase and stopped at another.
A component gets SIGTERM if its daemon dies without resetting (so nodelib flushes its
streams), and is started at most once in a run. How it is spawned is daemon/spawn.py's;
what is said with it over its channel, daemon/componentchannel.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from netspec.protocol import kinds as k
from netspec.protocol.channel import Channel
from netspec.protocol.errors import NetspecError
from netspec.protocol.exits import (
    ASKED,
    AWAITED,
    CLEAN,
    FAILED,
    KILLED,
    RUNNING,
    SCHEDULED,
    UNASKED,
    descendants,
    describe_returncode,
    exit_verdict,
    signal_pids,
)
from netspec.protocol.kinds import ComponentSpec

from .componentchannel import ComponentChannel, ComponentExited
from .ending import activity, ending
from .spawn import ExecFailed, spawn

log = logging.getLogger("netspecd")

# How long a component asked to stop may sit idle (asleep, its CPU time still) before
# SIGKILL; one at work on its end is waited for up to the step's deadline instead (`stop`).
STOP_GRACE_S = 5.0
# How often a component that is ending is looked at in /proc, between waits for its exit.
LOOK_S = 0.5
# What a patient stop keeps of the step's deadline, for the SIGKILL, the exit it brings and
# (at collect) the gathering of files after: a tenth of the time left, this at least.
KILL_RESERVE_S = 2.0
# How long a process that got SIGTERM at reset has before SIGKILL; and what a wait for a
# killed process's end is bounded by when no deadline came with the request.
KILL_GRACE_S = 2.0
OUTPUT_GRACE_S = 1.0
# A killed process is waited for this long at least, even past the step's deadline (and
# less than the daemon's own grace past it, handlers.ENTER_GRACE_S, so its ack says why).
KILLED_AT_LEAST_S = 1.0


class Outbox(Protocol):
    """Where events for the controller go (the session's connection)."""

    def emit(self, message: k.Event) -> None: ...

    async def drain(self) -> None:
        """Wait while the controller is behind; returns at once if it is gone."""


class StartRefused(NetspecError):
    """A component is not started: it was started in this run already, or the run was reset."""


class ComponentProcess:
    """One spawned component: its process, its channel (if aware) and its output files.

    Lifecycle: made with its run; `start()` spawns it once, in a phase, its output pumps,
    its exit watcher and its channel's reader in the caller's task group; `stop()` asks it
    to end. `close()` (or leaving its `async with`) ends whatever is left on every way out:
    it kills the process and its descendants if they still run, waits (bounded) for its
    exit to be seen, reaped and reported, and closes its channel; it may be called twice."""

    def __init__(self, spec: ComponentSpec, run_id: str, root: Path, outbox: Outbox,
                 claimed: Callable[[str, str, bool, int], None]):
        self.spec, self.run_id, self.outbox = spec, run_id, outbox
        self.claimed = functools.partial(claimed, spec.name)  # its claims of roles (ComponentChannel)
        self.dir = root / spec.name
        self.workdir = self.dir / "work"
        self.proc: asyncio.subprocess.Process | None = None
        # an aware component's channel, its waits
        self.link = ComponentChannel(spec.name, run_id, self.claimed)
        self.exited: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.stopping = False  # netspec asked it to end (its exit is ASKED)
        self.awaited = False  # its start phase runs it to its end (its exit is AWAITED)
        self.scheduled = False  # a fault of the schedule killed or terminated it (its exit is SCHEDULED)
        self.paused = False  # a fault of the schedule stopped it (SIGSTOP), none resumed it yet
        self.verdict = RUNNING  # exit_verdict of its end, fixed as it ended
        self.forced = False  # netspec had to SIGKILL it once asked to stop
        self.forced_why = ""  # after what: idle for the grace, or still ending at the deadline
        self.env: dict[str, str] = {}  # set by the supervisor: what only it knows
        self.started_ns = 0
        self.started_in: str | None = None  # the phase it was started in, from the first try on
        # The steps of the enters under way, oldest first (Supervisor.enter): it takes them
        # one at a time, in order, so the oldest is the one whose phase it is in.
        self.entered: list[int] = []
        self.ended_in: int | None = None  # the step its end belongs to (its Exit's), once ended

    @property
    def ending(self) -> str:
        """How its end comes about, so far: SCHEDULED, ASKED, AWAITED or UNASKED
        (protocol/exits.py): a fault of the schedule that came first is what ended it."""
        if self.scheduled:
            return SCHEDULED
        if self.stopping:
            return ASKED
        return AWAITED if self.awaited else UNASKED

    @property
    def ended_well(self) -> bool:
        """Still running, ended cleanly, or ended by the schedule's fault (its `verdict`)."""
        return self.verdict in (RUNNING, CLEAN, KILLED)

    @property
    def started(self) -> bool:
        return self.proc is not None

    @property
    def channel(self) -> Channel | None:
        """Its channel, once an aware component's process is spawned."""
        return self.link.channel

    @property
    def registered(self) -> asyncio.Future[list[str]]:
        """The phases an aware component registered for, once it has."""
        return self.link.registered

    @property
    def handed_back(self) -> list[str]:
        """The files its acks named, to be gathered with its outputs."""
        return self.link.handed_back

    async def __aenter__(self) -> ComponentProcess:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self, deadline: float | None = None) -> None:
        """Kill what is left of the process (SIGKILL to its group and every descendant) and
        wait until `deadline` (loop time; KILL_GRACE_S from now without one) for its exit
        to be reported (`exited`); then close its channel. A process not gone by then is
        said in the log, not waited on for ever. Never raises, but a cancellation."""
        loop = asyncio.get_running_loop()
        if self.proc is not None and not self.exited.done():
            self.stopping = True
            pids = self.pids()
            self.signal_group(signal.SIGKILL)
            signal_pids(pids, signal.SIGKILL)
            until = loop.time() + KILL_GRACE_S if deadline is None else deadline
            await asyncio.wait({self.exited}, timeout=max(until - loop.time(), 0.0))
            if not self.exited.done():
                log.warning("run %s: component %s (pid %d) not seen to end after SIGKILL",
                            self.run_id, self.spec.name, self.proc.pid)
        await self.link.close()

    async def start(self, tg: asyncio.TaskGroup, phase: str) -> None:
        """Spawn the process, its output pumps, its exit's watcher and its channel's reader
        in `tg`.

        Raises:
            StartRefused: it was started before in this run (a process is started once:
                a second would share this one's exit, output files and streams).
            ComponentExited: the program cannot be started.
        """
        if self.started_in is not None:
            pid = f" (pid {self.proc.pid})" if self.proc is not None else ""
            raise StartRefused(f"component '{self.spec.name}' was started in phase '{self.started_in}'"
                               f"{pid} already: a component is started once in a run, not again in "
                               f"phase '{phase}'")
        self.started_in = phase
        await self._spawn(tg)

    async def restart(self, tg: asyncio.TaskGroup) -> None:
        """Start it again, once its process ended (a restart fault of the schedule: daemon/
        faults.py): a process of its own, its output appended to the first's, its channel
        and exit watched anew. The one start a run allows is the first: this is the
        schedule's, not the component's.

        Raises:
            ComponentExited: the program cannot be started.
        """
        assert self.exited.done(), "a component is restarted once it ended"
        self.link = ComponentChannel(self.spec.name, self.run_id, self.claimed)
        self.exited = asyncio.get_running_loop().create_future()
        self.stopping = self.awaited = self.scheduled = self.paused = self.forced = False
        self.verdict, self.forced_why, self.ended_in = RUNNING, "", None
        await self._spawn(tg, again=True)

    async def _spawn(self, tg: asyncio.TaskGroup, again: bool = False) -> None:
        try:
            spawned = await spawn(self.spec, self.run_id, self.dir, self.workdir, self.env, again)
        except ExecFailed as exc:
            raise ComponentExited(f"cannot start {self.spec.argv[0]!r}: {exc.error.strerror}") from exc.error
        self.proc = spawned.proc
        self.started_ns = time.time_ns()
        stdout, stderr = spawned.outputs
        pumps = [tg.create_task(self._pump(self.proc.stdout, "stdout", stdout)),
                 tg.create_task(self._pump(self.proc.stderr, "stderr", stderr))]
        # Watched before anything else is awaited: a start cancelled while its channel opens
        # (the request's deadline) still has its exit seen, written and reported.
        tg.create_task(self._watch_exit(spawned.exit_code, pumps))
        if spawned.ours:
            await self.link.open(spawned.ours)
            if self.exited.done():  # it ended as its channel opened: its watcher did not see one
                await self.link.close()
            tg.create_task(self.link.read())

    async def _pump(self, pipe: asyncio.StreamReader | None, stream: str, f: BinaryIO) -> None:
        assert pipe is not None
        with f:
            while data := await pipe.read(65536):
                f.write(data)
                f.flush()
                self.outbox.emit(k.Output(component=self.spec.name, stream=stream, data=data))
                # A component that writes faster than the controller reads is held back
                # by its pipe, instead of growing this daemon's memory.
                await self.outbox.drain()

    async def _watch_exit(self, exit_code: asyncio.Future[int],
                          pumps: list[asyncio.Task[None]]) -> None:
        code = await exit_code
        # How it ended is judged as it is reaped, by the one rule (protocol/exits.py): a stop
        # asked for later (while its output drains below) does not make an end that came
        # first an asked one.
        how = self.ending
        # The step its end belongs to, whenever the controller reads of it: the one whose
        # callback it was in, or the start step that awaited its end (an enter unanswered).
        in_step = self.ended_in = self.entered[0] if self.entered else None
        if how == ASKED and self.link.pending and code >= 0:
            # It ended itself in a phase's callback, the next step's STOP sent but unread
            # (nodelib reads between callbacks): its end is that phase's, not the stop's,
            # whichever came first to this daemon (tests/e2e/test_k_of_n_ends.py).
            how = AWAITED if self.awaited else UNASKED
        # The exit is reported once its output is complete, so its tail is too; but a
        # background child may hold the pipes open long after, so not for ever.
        await asyncio.wait(pumps, timeout=OUTPUT_GRACE_S)
        self.verdict = exit_verdict(code, how)
        info = {"component": self.spec.name, "returncode": code, "argv": self.spec.argv,
                "duration_s": (time.time_ns() - self.started_ns) / 1e9,
                "expected": how == ASKED, "forced": self.forced, "ended_ns": time.time_ns()}
        try:
            (self.dir / "exit.json").write_text(json.dumps(info, indent=1) + "\n")
        except OSError as exc:  # its directory cleaned by a reset meanwhile: said, not fatal
            log.warning("run %s: component %s: exit.json not written: %s", self.run_id, self.spec.name, exc)
        # The exit goes before any ack it cuts short or lets through (a phase's, or
        # collect's): the controller learns of a death first (in a k-of-n step it is that
        # participant's failure, not the run's), and of every end before its step's end.
        self.outbox.emit(k.Exit(**info, failed=self.verdict == FAILED, scheduled=self.verdict == KILLED,
                                step=in_step))
        self.exited.set_result(info)
        self.link.fail(ComponentExited(describe_returncode(code)))
        log.info("run %s: component %s %s after %.3f s", self.run_id, self.spec.name,
                 describe_returncode(code), info["duration_s"])
        await self.link.close()

    async def call(self, phase: str, params: dict[str, Any], published: dict[str, Any],
                   **fields: Any) -> dict[str, Any]:
        """Enter `phase` in an aware component and return its ack; `fields` go along.

        Raises:
            ComponentExited: it has ended (or its end of the channel closed, and it ended
                soon after), or it ended before it acked.
        """
        if self.channel is not None and self.channel.closing and not self.exited.done():
            # Its end of the channel closed: it is ending (or will not ack); its exit is the news.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), OUTPUT_GRACE_S + KILL_GRACE_S)
        if self.channel is None or self.exited.done() or self.channel.closing:
            code = self.exited.result()["returncode"] if self.exited.done() else None
            raise ComponentExited(f"{describe_returncode(code)} and cannot take part")
        return await self.link.enter(phase, params, published, **fields)

    async def stop(self, grace: float | None = None, deadline: float | None = None) -> dict[str, Any]:
        """Ask the component to end (STOP message or SIGTERM), then kill what remains.

        A component at work on its end (its process exited but not yet reaped, or it or
        its descendants using CPU or runnable, as /proc/PID/stat tells: `ending`) is
        waited for until `deadline` less a reserve (a tenth of the time left,
        KILL_RESERVE_S at least): a fleet's worth of exits on a loaded machine takes
        longer than any fixed grace. One that sits idle for `grace` (it ignores the
        request, or hangs) is killed then, as is one still in a phase's callback when
        asked (its work is the phase's, not its end) and any stopped without a deadline:
        a fixed `grace` each. One that ignores the request but keeps the CPU busy is
        waited for until the deadline's reserve.

        Args:
            grace: how long it may sit idle before SIGKILL; without a deadline, or while
                in a phase, how long it has in all. None: its file's `stop_grace`, else
                STOP_GRACE_S.
            deadline: the loop time by which it must have ended, SIGKILL or not: the
                step's (or the request's). A killed process is ending, however long a
                loaded machine takes to tell: it is waited for until then (and at least
                KILLED_AT_LEAST_S), not for a fixed grace. Without one, KILL_GRACE_S after
                the SIGKILL.

        Returns:
            Its exit record ({} if it never started). `forced` is then set if it had to
            be killed, and `forced_why` says after what.

        Raises:
            ComponentExited: it had not ended by `deadline`, SIGKILL sent.
        """
        if not self.started:
            return {}
        if grace is None:
            grace = STOP_GRACE_S if self.spec.stop_grace_s is None else self.spec.stop_grace_s
        self.stopping = True
        loop = asyncio.get_running_loop()
        if self.paused and not self.exited.done():
            self.signal_group(signal.SIGCONT)  # stopped by the schedule: it cannot end until resumed
            self.paused = False
        if not self.exited.done():
            asked = loop.time()
            in_phase = bool(self.link.pending)
            if not self.link.ask_to_stop():  # a plain command: no channel to ask over
                self.signal_group(signal.SIGTERM)
            patience = None if deadline is None or in_phase else \
                deadline - max(KILL_RESERVE_S, (deadline - asked) / 10)
            how = "STOP" if self.channel is not None else "SIGTERM"
            if (info := await self._wait_while_ending(grace, patience, how)) is not None:
                return info
            # Only this component's processes: the rest of the run goes on.
            self.forced = True
            pids = self.pids()
            self.signal_group(signal.SIGKILL)
            signal_pids(pids, signal.SIGKILL)
        killed = loop.time()
        # A deadline that passed during the stop grace still leaves the kernel a moment.
        until = killed + KILL_GRACE_S if deadline is None else max(deadline, killed + KILLED_AT_LEAST_S)
        try:
            async with asyncio.timeout_at(until):
                return await asyncio.shield(self.exited)
        except TimeoutError:  # e.g. stuck in the kernel (D state): said, not waited on for ever
            waited = f"{loop.time() - killed:.1f} s after SIGKILL"
            raise ComponentExited(f"had not ended by {'the deadline' if deadline is not None else 'now'}, "
                                  f"{waited}") from None

    async def _wait_while_ending(self, grace: float, until: float | None, how: str) -> dict[str, Any] | None:
        """Its exit record once it ends, looked at every LOOK_S meanwhile; None (and
        `forced_why` set) once it sat idle for `grace`, or if it was still at work at
        `until` (loop time; never before `grace` is up; None: `grace` from now whatever
        it does). `how` it was asked to stop, for `forced_why`."""
        loop = asyncio.get_running_loop()
        asked = busy = loop.time()
        cap = asked + grace if until is None else max(until, asked + grace)
        seen, looked_at = activity(self.pids()), asked
        while (left := min(busy + grace, cap) - loop.time()) > 0:
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(asyncio.shield(self.exited), min(left, LOOK_S))
            if until is None or self.proc is None:
                continue
            looked, now = activity(self.pids()), loop.time()
            if ending(self.proc.pid, seen, looked, now - looked_at):
                busy = now
            seen, looked_at = looked, now
        self.forced_why = (f"still ending at its deadline, {loop.time() - asked:.1f} s after {how}"
                           if busy + grace > cap else f"idle {grace:g} s after {how}")
        return None

    def pids(self) -> list[int]:
        """The component's process and every descendant it still has."""
        if self.proc is None or self.exited.done():
            return []
        return [self.proc.pid, *descendants(self.proc.pid)]

    def signal_group(self, sig: signal.Signals) -> None:
        if self.proc is not None and not self.exited.done():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

