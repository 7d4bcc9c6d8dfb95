"""The clock bound's linear programme in plain Python, for the daemon: the `sync_clocks` gate
runs on every host, and a daemon must not load numpy for it (it would triple its memory).
Hulls here are small (a few seconds of exchanges bind through a handful of points), so the
vertex enumeration is cheap; `fit.line_bounds` is the same programme vectorised for the
offline fit, and a test holds the two to the same answers."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

# Linux will not slew a clock by more than 500 ppm; a crystal further off is broken. This
# keeps the bound finite where the exchanges alone do not pin the drift down.
MAX_DRIFT = 500e-6
FEASIBLE_SLACK_NS = 1.0

Point = tuple[int, int]


def hull(points: Iterable[Point], upper: bool) -> list[Point]:
    """The upper (or lower) convex hull of points sorted by x, in exact integers: the only
    points of a side that can bind a line from that side."""
    keep: list[Point] = []
    sign = 1 if upper else -1
    for p in points:
        while len(keep) >= 2:
            (ox, oy), (ax, ay) = keep[-2], keep[-1]
            if sign * ((ax - ox) * (p[1] - oy) - (ay - oy) * (p[0] - ox)) >= 0:
                keep.pop()
            else:
                break
        keep.append(p)
    return keep


@dataclass(frozen=True)
class FeasibleLines:
    """The vertices of the feasible (offset, drift) region of a window of exchanges, each
    offset at `t0` and relative to `base`. The offset at any instant t is linear in (offset,
    drift), so its range over the region is its range over these vertices: one LP per window
    answers for every instant (`range_at`)."""

    t0: int
    base: int
    vertices: tuple[tuple[float, float], ...]

    def range_at(self, t: int) -> tuple[int, int]:
        """The lowest and highest offset at `t`, outward to whole ns."""
        dx = float(t - self.t0)
        values = [a + b * dx for a, b in self.vertices]
        # Outward to whole ns, forgiving float noise far below one.
        return self.base + math.floor(min(values) + 1e-6), self.base + math.ceil(max(values) - 1e-6)


def feasible_lines(exchanges: Iterable[tuple[int, int, int, int]], t0: int) -> FeasibleLines | None:
    """Every line lying on or above each exchange's lower point (t1, t1 - t2) and on or below
    its upper point (t4, t4 - t3), with |drift| <= MAX_DRIFT, as the vertices of that set;
    None if no line fits or there is no exchange."""
    rows = list(exchanges)
    if not rows:
        return None
    lower = hull(sorted((t1, t1 - t2) for t1, t2, _, _ in rows), upper=True)
    upper = hull(sorted((t4, t4 - t3) for _, _, t3, t4 in rows), upper=False)
    base = int(statistics.median(y for _, y in lower))
    points = [(float(x - t0), float(y - base), True) for x, y in lower]
    points += [(float(x - t0), float(y - base), False) for x, y in upper]
    vertices = tuple((a, b) for a, b in _vertices(points) if abs(b) <= MAX_DRIFT * (1 + 1e-9) and all(
        (a + b * dx - y >= -FEASIBLE_SLACK_NS) if is_lower else (a + b * dx - y <= FEASIBLE_SLACK_NS)
        for dx, y, is_lower in points))
    return FeasibleLines(t0, base, vertices) if vertices else None


def offset_range(exchanges: Iterable[tuple[int, int, int, int]], t: int) -> tuple[int, int] | None:
    """The range of the offset at `t` over every feasible line (`feasible_lines`); None if
    no line fits or there is no exchange."""
    lines = feasible_lines(exchanges, t)
    return None if lines is None else lines.range_at(t)


def _vertices(points: list[tuple[float, float, bool]]) -> Iterable[tuple[float, float]]:
    """Optima of a two-variable LP lie at vertices: lines through two points, and lines of
    the steepest drift allowed through one."""
    for i, (xi, yi, _) in enumerate(points):
        for xj, yj, _ in points[i + 1:]:
            if abs(xi - xj) > 0.5:
                b = (yi - yj) / (xi - xj)
                yield yi - b * xi, b
    for b in (MAX_DRIFT, -MAX_DRIFT):
        for x, y, _ in points:
            yield y - b * x, b

