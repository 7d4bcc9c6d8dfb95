"""The online estimate behind the `sync_clocks` gate: this host's current offset from the
reference and a bound on it, from the last few seconds of exchanges, by the same linear
programme as the offline fit (in plain Python: the daemon runs it), evaluated now."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass

from .client import Exchange
from .hull import FeasibleLines, feasible_lines

WINDOW_NS = 4_000_000_000


@dataclass(frozen=True)
class Estimate:
    offset_ns: int
    bound_ns: int
    exchanges: int
    source: str  # kernel or user

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class Gate:
    """Feed it every exchange with `add`; `estimate()` at any time; `reset()` after a clock
    change, since exchanges from before it say nothing about the clock now."""

    def __init__(self, window_ns: int = WINDOW_NS):
        self.window_ns = window_ns
        self.recent: deque[Exchange] = deque()
        # The window's feasible lines, solved once per new exchange at most: an estimate at
        # any instant is then a few multiplications (every ack of a step carries one).
        self._solved: tuple[FeasibleLines, int, str] | None = None

    def add(self, ex: Exchange) -> None:
        self.recent.append(ex)
        while self.recent and self.recent[0].t4 < ex.t4 - self.window_ns:
            self.recent.popleft()
        self._solved = None

    def reset(self) -> None:
        self.recent.clear()
        self._solved = None

    def estimate(self, now_ns: int | None = None) -> Estimate | None:
        """The offset and its bound at `now_ns` (default: now); None before the first exchange."""
        now = time.time_ns() if now_ns is None else now_ns
        if self._solved is None:
            recent = list(self.recent)
            kernel = [e for e in recent if e.kernel]
            chosen = kernel if len(kernel) * 2 >= len(recent) else recent
            lines = feasible_lines(((e.t1, e.t2, e.t3, e.t4) for e in chosen), now)
            if lines is None:
                return None
            self._solved = lines, len(chosen), "kernel" if chosen is kernel else "user"
        lines, count, source = self._solved
        lo, hi = lines.range_at(now)
        return Estimate((lo + hi) // 2, (hi - lo + 1) // 2, count, source)
