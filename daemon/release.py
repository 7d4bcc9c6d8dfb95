"""A step released at an instant (`release: at`): the controller sends the step ahead with
an instant on the reference clock; this host converts it with its own clock estimate and
starts the phase then, to the tens of microseconds its scheduler allows."""

from __future__ import annotations

import asyncio
import ctypes
import time
from typing import Any

from netspec.clksync.node import ClockService

PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30
# The loop's timers wake to the millisecond, later on a busy machine; the last stretch is a
# blocking sleep, which the kernel ends to the microsecond while the thread's timer slack is 1 ns.
LAST_STRETCH_S = 0.005
_libc = ctypes.CDLL(None, use_errno=True)
MAX_WAKE_LATE_NS = 500_000
SPUN_NS = 50_000
_wake_late_ns = 100_000  # how late this thread's sleeps end: learnt by wait_until


def local_instant(clock: ClockService, release_ns: int) -> tuple[int, dict[str, Any]]:
    """The instant `release_ns` of the reference clock on this host's clock, and what the
    ack says of it: the instant, how late the step arrived for it, and whether this host
    had no clock estimate (then the instant is taken on its own clock as it is)."""
    arrived = time.time_ns()
    est = clock.estimate(arrived)
    at = release_ns + (est.offset_ns if est is not None else 0)
    said: dict[str, Any] = {"at_ns": at, "missed_ns": max(0, arrived - at)}
    if est is None:
        said["unsynchronised"] = True
    return at, said


async def wait_until(at_ns: int) -> None:
    """Return at `at_ns` on this host's clock, or at once if it passed."""
    global _wake_late_ns
    delay = (at_ns - time.time_ns()) / 1e9
    if delay > LAST_STRETCH_S:
        await asyncio.sleep(delay - LAST_STRETCH_S)
    # A sleep ends some tens of microseconds late on this host, by its timer and its
    # scheduler: the sleep aims that much early, learnt from the last ones, and SPUN_NS more,
    # which is spun (a wake-up varies by tens of microseconds).
    aim = at_ns - _wake_late_ns - SPUN_NS
    rest = aim - time.time_ns()
    if rest > 0:
        # Slack batches wake-ups (up to 50 us late by default); only this sleep goes without,
        # so that the components this thread spawns keep the default.
        slack = _libc.prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)
        _libc.prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
        time.sleep(rest / 1e9)  # at most LAST_STRETCH_S: the loop waits that long for precision
        if slack > 0:
            _libc.prctl(PR_SET_TIMERSLACK, slack, 0, 0, 0)
        late = time.time_ns() - aim
        _wake_late_ns = min(max(round(0.7 * _wake_late_ns + 0.3 * late), 0), MAX_WAKE_LATE_NS)
    while time.time_ns() < at_ns:
        pass
