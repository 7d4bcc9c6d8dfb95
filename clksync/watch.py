"""Clock changes: steps and rate changes of CLOCK_REALTIME against CLOCK_MONOTONIC_RAW.

The kernel itself says when CLOCK_REALTIME is set (settimeofday, clock_settime, a step by
adjtimex): a timerfd armed with TFD_TIMER_CANCEL_ON_SET becomes readable. The size of the
step, and any change of rate (a slew), show in realtime - raw, which is constant while
nobody touches the clock. clksync only watches; it never sets or slews a clock.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

CLOCK_REALTIME = 0
TFD_CLOEXEC, TFD_NONBLOCK = os.O_CLOEXEC, os.O_NONBLOCK
TFD_TIMER_ABSTIME, TFD_TIMER_CANCEL_ON_SET = 1, 2
STEP_NS = 1_000_000  # without the timerfd, a jump of realtime - raw this big is a step
RATE_WINDOW_NS = 2_000_000_000
RATE_PPM = 1.0
READ_SPREAD_NS = 20_000


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def clock_pair() -> tuple[int, int, int]:
    """(realtime, raw, spread) read as close together as this process can: the realtime
    reading is the middle of two that bracket the raw one, `spread` ns apart (so it is off
    by at most half that)."""
    best: tuple[int, int, int] | None = None
    for _ in range(3):
        r1 = time.clock_gettime_ns(time.CLOCK_REALTIME)
        raw = time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
        r2 = time.clock_gettime_ns(time.CLOCK_REALTIME)
        if best is None or r2 - r1 < best[0]:
            best = (r2 - r1, r1 + (r2 - r1) // 2, raw)
        if r2 - r1 < READ_SPREAD_NS:
            break
    assert best is not None
    return best[1], best[2], best[0]


@dataclass(frozen=True)
class ClockChange:
    kind: str  # "step" or "rate"
    realtime_ns: int
    raw_ns: int
    jump_ns: int = 0
    ppm_before: float = 0.0
    ppm_after: float = 0.0


class ClockWatch:
    """Call `check()` now and then; each change found goes to `report`. Lifecycle: created
    armed, `close()` releases the timerfd."""

    def __init__(self, report: Callable[[ClockChange], None]):
        self.report = report
        self.fd = self._timerfd()
        self.rate_ppm = 0.0
        realtime, raw, spread = clock_pair()
        self.last = (realtime - raw, raw)
        self.window = (realtime - raw, raw, spread)

    def _timerfd(self) -> int | None:
        libc = _libc()
        if libc is None or not hasattr(libc, "timerfd_create"):
            return None
        fd = libc.timerfd_create(CLOCK_REALTIME, TFD_CLOEXEC | TFD_NONBLOCK)
        if fd < 0:
            return None
        # An absolute expiry far in the future: only the cancel-on-set ever wakes it.
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(2**62 // 10**9, 0))
        self._arm = lambda: libc.timerfd_settime(fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET,
                                                 ctypes.byref(spec), None)
        if self._arm() != 0:
            os.close(fd)
            return None
        return fd

    def _was_set(self) -> bool:
        if self.fd is None:
            return False
        try:
            os.read(self.fd, 8)
        except BlockingIOError:
            return False
        except OSError:  # ECANCELED: the clock was set; re-arm for the next time
            self._arm()
            return True
        return False

    def check(self) -> bool:
        """Look for a change since the last check; True if one was found and reported."""
        realtime, raw, spread = clock_pair()
        diff = realtime - raw
        last_diff, last_raw = self.last
        jump = diff - last_diff - round(self.rate_ppm * 1e-6 * (raw - last_raw))
        if self._was_set() or (self.fd is None and abs(jump) > STEP_NS + spread):
            self.report(ClockChange("step", realtime, raw, jump_ns=jump))
            self.last, self.window = (diff, raw), (diff, raw, spread)
            return True
        self.last = (diff, raw)
        window_diff, window_raw, window_spread = self.window
        if raw - window_raw < RATE_WINDOW_NS:
            return False
        self.window = (diff, raw, spread)
        rate = (diff - window_diff) / (raw - window_raw) * 1e6
        # Each reading is off by up to half its spread: on a busy host (a thousand daemons
        # on two cores) a few microseconds over the window's 2 s, which alone would read as
        # a change of rate, and every one found resets the gate's exchanges.
        noise_ppm = (window_spread + spread) / 2 / (raw - window_raw) * 1e6
        if abs(rate - self.rate_ppm) <= RATE_PPM + noise_ppm:
            return False
        self.report(ClockChange("rate", realtime, raw, ppm_before=self.rate_ppm, ppm_after=rate))
        self.rate_ppm = rate
        return True

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
