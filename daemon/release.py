"""A step released at an instant (`release: at`): the controller sends the step ahead with
an instant on the reference clock; this host converts it with its own clock estimate and
starts the phase then, to the tens of microseconds its scheduler allows."""

from __future__ import annotations

import asyncio
import ctypes
import os
import time
from concurrent.futures import Executor
from typing import Any

from netspec.clksync.node import ClockService

from .realtime import set_policy

PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30
# Up to this long before the instant the loop's own timer waits; the rest, a thread's sleep
# (a run reset meanwhile leaves that thread asleep until the instant, no longer).
THREAD_WAIT_S = 1.0
_libc = ctypes.CDLL(None, use_errno=True)
MAX_WAKE_LATE_NS = 200_000
_wake_late_ns = 100_000  # how late this thread's sleeps end: learnt by wait_until


def local_instant(clock: ClockService, release_ns: int) -> tuple[int, dict[str, Any]]:
    """The instant `release_ns` of the reference clock on this host's clock, and what the
    ack says of it: the instant, how late the step arrived for it, and the bound of the
    estimate it was converted with, or that this host had none (then the instant is taken on
    its own clock as it is)."""
    arrived = time.time_ns()
    est = clock.estimate(arrived)
    at = release_ns + (est.offset_ns if est is not None else 0)
    said: dict[str, Any] = {"at_ns": at, "missed_ns": max(0, arrived - at)}
    if est is None:
        said["unsynchronised"] = True
    else:  # how far the instant on this clock may be from the reference's: the estimate's bound then
        said["bound_ns"] = est.bound_ns
    return at, said


async def prepare() -> None:
    """Start the thread a release waits in, at a run's setup. Started by a fleet's first
    release, every daemon at once, the threads (and the import of asyncio's executor, where
    no fork server had it) took 1000 hosts on 2 cores past their first instant: 461 ms late
    at the median, against 7.7 ms once started at setup (bench/scale.py)."""
    await asyncio.to_thread(time.time_ns)


async def wait_until(at_ns: int, thread_s: float = THREAD_WAIT_S,
                     executor: Executor | None = None) -> tuple[int, bool]:
    """Wait until `at_ns` on this host's clock (at once if it passed); the instant the
    phase starts, and whether real-time priority was refused to the wait (no CAP_SYS_NICE).
    Its last `thread_s` are slept in a thread of `executor` (the loop's default pool if
    None), which that thread holds until the instant."""
    delay = (at_ns - time.time_ns()) / 1e9
    if delay > thread_s:
        await asyncio.sleep(delay - thread_s)
    # The rest is waited in a thread that sleeps at real-time priority where it may. Every
    # daemon of a fleet wakes at once; on a machine with fewer cores than daemons, the first
    # to wake would hold the cores with the step's work while the rest wait to run their
    # loops, and to wake. Asleep, the thread costs nothing; awake, it takes its stamp ahead
    # of every ordinary process and steps down.
    return await asyncio.get_running_loop().run_in_executor(executor, _sleep_until, at_ns)


def _sleep_until(at_ns: int) -> tuple[int, bool]:
    global _wake_late_ns
    # A sleep ends some tens of microseconds late on this host, by its timer and its
    # scheduler: the sleep aims that much early, learnt from the last ones, and spins what
    # is left if it woke early (at most MAX_WAKE_LATE_NS).
    aim = at_ns - _wake_late_ns
    if at_ns <= time.time_ns():
        return time.time_ns(), False  # nothing to wait for: no priority asked, none refused
    realtime = set_policy(os.SCHED_FIFO, 1)
    # Slack batches wake-ups (up to 50 us late by default); this thread's sleep goes without.
    slack = _libc.prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)
    _libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    try:
        time.sleep(max(aim - time.time_ns(), 0) / 1e9)
        woke = time.time_ns()
        while time.time_ns() < at_ns:  # woke earlier than it learnt to expect: the rest is spun
            pass
        started = time.time_ns()
    finally:
        if realtime:
            set_policy(os.SCHED_OTHER, 0)
        if slack > 0:
            _libc.prctl(PR_SET_TIMERSLACK, slack, 0, 0, 0)
    _wake_late_ns = min(max(round(0.7 * _wake_late_ns + 0.3 * (woke - aim)), 0), MAX_WAKE_LATE_NS)
    return started, not realtime
