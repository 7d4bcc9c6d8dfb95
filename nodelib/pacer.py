"""Open-loop pacing: operations issued at intended instants, not when the last reply came.

A closed-loop client that waits for each reply sends nothing while the system stalls, so
the stall is one slow operation among thousands: its latency figures omit exactly the
time the system was bad (coordinated omission). A pacer fixes the instants first, at a
constant rate or as Poisson arrivals, and yields each; the program passes it to its
operation's end (`OP.ok(t, intended_ns=instant)`), so latency counts from the intended
instant and an operation that could only start late (the client was still waiting for the
last) is charged for the wait. How late each started is its record's lag; the pacer also
keeps the worst lag and how many started more than `late_ns` late, and says it
(`behind()`), so that a pacer that cannot keep up is never taken for a slow system.

    pacer = nodelib.Pacer.from_params(ctx.params)   # rate, arrivals, duration_s, seed
    for instant in pacer:
        t = OP.start()
        ...
        OP.ok(t, intended_ns=instant)
    if pacer.fell_behind:
        ctx.warn(pacer.behind())

Without a rate (`arrivals: closed`) the same loop is a closed loop: each instant is None,
the next operation starts when the last ended, and latency counts from each actual start.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from netspec.protocol.errors import NetspecError

TYPE_CHECKING = False  # typing's own flag, without importing typing: a program's start (nodelib's imports)
if TYPE_CHECKING:
    from typing import Any

ARRIVALS = ("constant", "poisson", "closed")
# The last stretch of a wait is spun, not slept: a sleep wakes 50-100 us late here.
SPIN_NS = 200_000
LATE_NS = 1_000_000


class Pacer:
    """Intended instants (time.time_ns, the streams' clock) at `rate` per second for
    `duration_s`, `arrivals` constant (evenly spaced) or poisson (exponential gaps, from
    `seed`), or none at all (closed). As it goes it counts `issued`, `late` (operations that
    started more than `late_ns` after their instant), `worst_lag_ns` and `worst_at` (which
    operation, 0-based); with `keep_lags`, each operation's lag in `lags` (the bench's: the
    records hold them too)."""

    def __init__(self, rate: float | None, duration_s: float, arrivals: str = "constant",
                 seed: int | None = None, late_ns: int = LATE_NS, spin_ns: int = SPIN_NS,
                 keep_lags: bool = False):
        self.rate, self.duration_s, self.arrivals, self.seed = rate, duration_s, arrivals, seed
        self.late_ns, self.spin_ns, self.keep_lags = late_ns, spin_ns, keep_lags
        self.issued = self.late = self.worst_lag_ns = self.worst_at = 0
        self.lags: list[int] = []
        if self.arrivals not in ARRIVALS:
            raise NetspecError(f"pacer: arrivals {self.arrivals!r} is not one of {', '.join(ARRIVALS)}")
        if self.arrivals != "closed" and not (isinstance(self.rate, (int, float)) and self.rate > 0):
            raise NetspecError(f"pacer: {self.arrivals} arrivals need a rate > 0 per second "
                               f"(got {self.rate!r})")
        if not self.duration_s > 0:
            raise NetspecError(f"pacer: duration_s must be > 0 (got {self.duration_s!r})")

    @classmethod
    def from_params(cls, params: dict[str, Any], prefix: str = "") -> Pacer:
        """The pacer a component's params set (a campaign sweeps them): `rate` (operations
        per second), `arrivals` (constant, the default with a rate; poisson; closed, the
        default without), `duration_s` (default 5), `seed`; each name after `prefix`."""
        rate = params.get(prefix + "rate")
        arrivals = params.get(prefix + "arrivals", "closed" if rate in (None, 0) else "constant")
        seed = params.get(prefix + "seed")
        return cls(None if rate is None else float(rate), float(params.get(prefix + "duration_s", 5)),
                   str(arrivals), None if seed is None else int(seed))

    @property
    def open_loop(self) -> bool:
        return self.arrivals != "closed"

    def __iter__(self) -> Iterator[int | None]:
        end_mono = time.monotonic_ns() + int(self.duration_s * 1e9)
        if not self.open_loop:
            while time.monotonic_ns() < end_mono:
                self.issued += 1
                yield None
            return
        assert self.rate is not None
        import random  # here: importing nodelib stays light

        gaps = random.Random(self.seed)
        mono0, wall0 = time.monotonic_ns(), time.time_ns()
        offset, period = 0.0, 1e9 / self.rate
        while True:
            target = mono0 + int(offset)
            if target >= end_mono:
                return
            lag = _wait_until(target, self.spin_ns)
            if self.keep_lags:
                self.lags.append(lag)
            if lag > self.late_ns:
                self.late += 1
            if lag > self.worst_lag_ns:
                self.worst_lag_ns, self.worst_at = lag, self.issued
            self.issued += 1
            yield wall0 + int(offset)
            offset += gaps.expovariate(self.rate) * 1e9 if self.arrivals == "poisson" else period

    @property
    def fell_behind(self) -> bool:
        return self.late > 0

    def behind(self) -> str:
        """In words: how far behind its instants the pacer fell ("" if it kept up)."""
        if not self.fell_behind:
            return ""
        return (f"pacer fell behind its {self.arrivals} {self.rate:g}/s: {self.late} of {self.issued} "
                f"operations started more than {self.late_ns / 1e6:g} ms late, the worst "
                f"{self.worst_lag_ns / 1e6:.1f} ms (operation {self.worst_at}); their latency counts from "
                "the intended instant")

    def summary(self) -> str:
        """A line for the phase's ack: what was issued (`behind()` says how late)."""
        how = f"{self.arrivals} {self.rate:g}/s" if self.open_loop else "closed loop"
        return f"{self.issued} operations, {how} for {self.duration_s:g} s"


def _wait_until(target_mono: int, spin_ns: int) -> int:
    """Wait for monotonic instant `target_mono`; returns how late (ns) the wait ended."""
    left = target_mono - time.monotonic_ns()
    if left > spin_ns:
        time.sleep((left - spin_ns) / 1e9)
    while (now := time.monotonic_ns()) < target_mono:
        pass
    return now - target_mono
