"""Offline clock fit: a host's offset from the reference clock, with a hard error bound.

Offset means host clock minus reference clock. One exchange (t1, t4 on the host, t2, t3 on
the reference) says the request left before it arrived and the reply arrived after it
left, so at host time t1 the offset is at least t1 - t2 ("lower point") and at host time t4
at most t4 - t3 ("upper point"). Per short bin the minimum-round-trip exchange and the
tightest lower and upper points are kept. At each kept exchange (a knot) the estimate is a
weighted line through the nearby midpoints over a two-sided window, which shrinks while a
quadratic term is significant (the offset curves) or no line fits between the points; the
bound is the range of every line lying above all lower and below all upper points of that
window (a two-variable linear programme, solved at its vertices), and the estimate is
clamped into it. A clock step or rate change starts a new segment.

Timestamps stay integer ns: a float64 has 256 ns steps at today's epoch. Floats only ever
hold differences within a window.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from .hull import FEASIBLE_SLACK_NS, MAX_DRIFT, hull

BIN_NS = 500_000_000
WINDOW_MAX_NS = 8_000_000_000
WINDOW_MIN_NS = 1_000_000_000
CURVATURE_FLOOR_NS = 10.0
GOOD_HALF_FACTOR = 4
GOOD_HALF_SLACK_NS = 1000
MIN_GOOD_BINS = 4  # on each side
INT64 = np.int64


@dataclass
class Exchanges:
    """One host's exchanges with the reference, in host time order."""

    t1: np.ndarray
    t2: np.ndarray
    t3: np.ndarray
    t4: np.ndarray
    kernel: np.ndarray

    @classmethod
    def from_rows(cls, rows: list[tuple[int, int, int, int, bool]]) -> Exchanges:
        rows = sorted(rows)
        cols = list(zip(*rows, strict=True)) if rows else [(), (), (), (), ()]
        return cls(*(np.asarray(c, dtype=INT64) for c in cols[:4]), np.asarray(cols[4], dtype=bool))

    def __len__(self) -> int:
        return len(self.t1)

    def select(self, mask: np.ndarray) -> Exchanges:
        return Exchanges(self.t1[mask], self.t2[mask], self.t3[mask], self.t4[mask], self.kernel[mask])


def _hull(x: np.ndarray, y: np.ndarray, upper: bool) -> tuple[np.ndarray, np.ndarray]:
    keep = hull(zip(x.tolist(), y.tolist(), strict=True), upper)
    hx, hy = zip(*keep, strict=True) if keep else ((), ())
    return np.asarray(hx, dtype=INT64), np.asarray(hy, dtype=INT64)


def hard_bounds(ex: Exchanges, t: int) -> tuple[int, int, float, float] | None:
    """`line_bounds` over every exchange in `ex`, through the hulls that bind."""
    lower = np.argsort(ex.t1, kind="stable")
    upper = np.argsort(ex.t4, kind="stable")
    lx, ly = _hull(ex.t1[lower], (ex.t1 - ex.t2)[lower], upper=True)
    ux, uy = _hull(ex.t4[upper], (ex.t4 - ex.t3)[upper], upper=False)
    return line_bounds(lx, ly, ux, uy, t)


def line_bounds(lx: np.ndarray, ly: np.ndarray, ux: np.ndarray, uy: np.ndarray,
                t: int) -> tuple[int, int, float, float] | None:
    """Over every line y = a + b (x - t) on or above the lower points (lx, ly), on or below
    the upper points (ux, uy), with |b| <= MAX_DRIFT: the range of a (the offset at t) and
    of b (the drift). None if no line fits. Optima of a 2-variable LP lie at vertices, so
    every vertex (two constraints met with equality) is tried against all at once."""
    base = int(np.median(ly))
    dx = np.concatenate([lx - t, ux - t]).astype(float)
    y = np.concatenate([ly - base, uy - base]).astype(float)
    lower = np.arange(len(dx)) < len(lx)
    i, j = np.triu_indices(len(dx), 1)
    denom = dx[i] - dx[j]
    ok = np.abs(denom) > 0.5
    i, j = i[ok], j[ok]
    b = np.concatenate([(y[i] - y[j]) / denom[ok], np.full(len(dx), MAX_DRIFT), np.full(len(dx), -MAX_DRIFT)])
    a = np.concatenate([y[i], y, y]) - b * np.concatenate([dx[i], dx, dx])
    slack = a[:, None] + b[:, None] * dx[None, :] - y[None, :]
    feasible = np.all(np.where(lower, slack >= -FEASIBLE_SLACK_NS, slack <= FEASIBLE_SLACK_NS), axis=1)
    feasible &= np.abs(b) <= MAX_DRIFT * (1 + 1e-9)
    if not feasible.any():
        return None
    a, b = a[feasible], b[feasible]
    # Outward to whole ns, forgiving float noise far below one.
    return (base + int(np.floor(a.min() + 1e-6)), base + int(np.ceil(a.max() - 1e-6)),
            float(b.min()), float(b.max()))


@dataclass
class Bins:
    """Per bin, the minimum-round-trip exchange: its midpoint, offset and half-width."""

    mid: np.ndarray
    offset: np.ndarray
    half: np.ndarray


def bin_exchanges(ex: Exchanges, bin_ns: int = BIN_NS) -> Bins:
    residence = ex.t3 - ex.t2
    rtt = ex.t4 - ex.t1 - residence
    groups = (ex.t1 - ex.t1[0]) // bin_ns
    order = np.lexsort((rtt, groups))  # by bin, then round trip: each bin's first is its best
    best = order[np.unique(groups[order], return_index=True)[1]]
    ly, uy = ex.t1[best] - ex.t2[best], ex.t4[best] - ex.t3[best]
    return Bins(mid=ex.t1[best] + (ex.t4[best] - ex.t1[best]) // 2,
                offset=ly + (uy - ly) // 2, half=(uy - ly) // 2)


def _weighted_fit(dx: np.ndarray, y: np.ndarray, w: np.ndarray,
                  degree: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Weighted least squares polynomial (constant first); coefficients and standard errors."""
    if len(dx) <= degree + 1:
        return None
    x = dx / 1e9
    design = np.vander(x, degree + 1, increasing=True)
    sw = np.sqrt(w)
    coef, *_ = np.linalg.lstsq(design * sw[:, None], y * sw, rcond=None)
    resid = (y - design @ coef) * sw
    dof = len(x) - degree - 1
    sigma2 = float(resid @ resid) / dof
    try:
        cov = np.linalg.inv((design * w[:, None]).T @ design) * sigma2
    except np.linalg.LinAlgError:
        return None
    return coef, np.sqrt(np.maximum(np.diag(cov), 0.0))


@dataclass
class Knot:
    at: int
    offset: int
    lo: int
    hi: int
    drift: float
    drift_lo: float
    drift_hi: float
    window_ns: int


def _good(bins: Bins) -> np.ndarray:
    """Bins whose best exchange came through about as fast as the segment's fastest; the
    rest were queued somewhere, and their midpoints carry up to half the queueing as bias."""
    return bins.half <= GOOD_HALF_FACTOR * np.percentile(bins.half, 10) + GOOD_HALF_SLACK_NS


def _knot(ex: Exchanges, bins: Bins, good: np.ndarray, k: int) -> Knot:
    t = int(bins.mid[k])
    half_floor = 20.0
    # Through a long stretch of queued exchanges the window reaches out to fast ones on
    # both sides: their constraints pin the line down where the queued ones cannot.
    floor = WINDOW_MIN_NS
    before, after = good & (bins.mid <= t), good & (bins.mid >= t)
    for side in (np.sort(t - bins.mid[before]), np.sort(bins.mid[after] - t)):
        if len(side):
            floor = max(floor, int(side[min(MIN_GOOD_BINS, len(side)) - 1]))
    window = max(WINDOW_MAX_NS, floor)
    while True:
        near = np.abs(bins.mid - t) <= window
        dx = (bins.mid[near] - t).astype(float)
        y = (bins.offset[near] - bins.offset[k]).astype(float)
        w = 1.0 / (bins.half[near].astype(float) + half_floor) ** 2
        lp = hard_bounds(ex.select((ex.t1 >= t - window) & (ex.t4 <= t + window)), t)
        quad = _weighted_fit(dx, y, w, 2)
        curved = quad is not None and (abs(quad[0][2]) > 3 * quad[1][2]
                                       and abs(quad[0][2]) * (window / 1e9) ** 2 > CURVATURE_FLOOR_NS)
        if window <= floor or (lp is not None and not curved):
            break
        window = max(window // 2, floor)
    line = _weighted_fit(dx, y, w, 1)
    if line is None:
        estimate, drift = 0.0, 0.0
    else:
        estimate, drift = float(line[0][0]), float(line[0][1]) / 1e9
    bend = abs(quad[0][2]) * (window / 1e9) ** 2 if quad is not None else 0.0
    offset = int(bins.offset[k]) + round(estimate)
    if lp is None:
        # No line fits even the shortest window: fall back on this bin's own exchange.
        lo, hi = int(bins.offset[k] - bins.half[k]), int(bins.offset[k] + bins.half[k])
        drift_lo = drift_hi = drift
    else:
        lo, hi, drift_lo, drift_hi = lp
    lo, hi = lo - int(np.ceil(bend)), hi + int(np.ceil(bend))
    return Knot(t, min(max(offset, lo), hi), lo, hi, drift, drift_lo, drift_hi, window)


@dataclass
class Segment:
    """The fit from one clock change (`start`, host time) to the next."""

    start: int
    knots: list[Knot]
    at: np.ndarray = field(init=False)
    offset: np.ndarray = field(init=False)
    lo: np.ndarray = field(init=False)
    hi: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.at = np.array([k.at for k in self.knots], dtype=INT64)
        self.offset = np.array([k.offset for k in self.knots], dtype=INT64)
        self.lo = np.array([k.lo for k in self.knots], dtype=INT64)
        self.hi = np.array([k.hi for k in self.knots], dtype=INT64)

    def offsets(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Offset estimate, lowest and highest offset at each host time in `local`."""
        i = np.clip(np.searchsorted(self.at, local, side="right") - 1, 0, len(self.at) - 1)
        j = np.minimum(i + 1, len(self.at) - 1)
        span = (self.at[j] - self.at[i]).astype(float)
        frac = np.where(span > 0, (local - self.at[i]) / np.where(span > 0, span, 1.0), 0.0)
        frac = np.clip(frac, 0.0, 1.0)

        def chord(v: np.ndarray) -> np.ndarray:
            return v[i] + np.round(frac * (v[j] - v[i]).astype(float)).astype(INT64)

        offset, lo, hi = chord(self.offset), chord(self.lo), chord(self.hi)
        # Beyond the first or last knot: carry on that knot's drift, and widen the bound
        # by the drift's full range.
        for edge, outside in ((self.knots[0], local < self.at[0]), (self.knots[-1], local > self.at[-1])):
            if not outside.any():
                continue
            d = (local[outside] - edge.at).astype(float)
            offset[outside] = edge.offset + np.round(edge.drift * d).astype(INT64)
            lo[outside] = edge.lo + np.floor(np.minimum(edge.drift_lo * d, edge.drift_hi * d)).astype(INT64)
            hi[outside] = edge.hi + np.ceil(np.maximum(edge.drift_lo * d, edge.drift_hi * d)).astype(INT64)
        return offset, lo, hi


@dataclass
class ClockFit:
    """One host's clock against the reference over a run: `to_global` converts its
    timestamps. A host with no exchanges left has no segments and cannot be converted."""

    host: str
    reference: str
    segments: list[Segment]
    exchanges: int
    source: str  # kernel, user, mixed or reference

    @classmethod
    def identity(cls, host: str) -> ClockFit:
        return cls(host, host, [], 0, "reference")

    @property
    def usable(self) -> bool:
        """Whether `to_global` can convert this host's times."""
        return self.source == "reference" or bool(self.segments)

    def offsets(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        local = np.asarray(local, dtype=INT64)
        zero = np.zeros(len(local), dtype=INT64)
        if self.source == "reference":
            return zero, zero.copy(), zero.copy()
        if not self.segments:
            raise ValueError(f"host {self.host}: no clock exchanges with {self.reference} to fit")
        offset, lo, hi = zero, zero.copy(), zero.copy()
        starts = np.array([s.start for s in self.segments], dtype=INT64)
        which = np.clip(np.searchsorted(starts, local, side="right") - 1, 0, len(self.segments) - 1)
        for n, seg in enumerate(self.segments):
            mask = which == n
            if mask.any():
                offset[mask], lo[mask], hi[mask] = seg.offsets(local[mask])
        return offset, lo, hi

    def to_global(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Reference-clock time of each host timestamp and the bound its error lies within."""
        local = np.asarray(local, dtype=INT64)
        offset, lo, hi = self.offsets(local)
        return local - offset, np.maximum(hi - offset, offset - lo)


def fit(host: str, reference: str, ex: Exchanges, changes: list[int] = (),
        bin_ns: int = BIN_NS) -> ClockFit:
    """Fit `host`'s exchanges, a new segment at each host time in `changes`."""
    edges = [np.iinfo(INT64).min, *sorted(changes), np.iinfo(INT64).max]
    segments = []
    for start, end in itertools.pairwise(edges):
        part = ex.select((ex.t1 >= start) & (ex.t4 < end))
        if len(part) < 2:
            continue
        bins = bin_exchanges(part, bin_ns)
        good = _good(bins)
        knots = [_knot(part, bins, good, k) for k in range(len(bins.mid))]
        segments.append(Segment(int(start), knots))
    kinds = set(ex.kernel.tolist())
    source = "mixed" if len(kinds) > 1 else "kernel" if kinds == {True} else "user"
    return ClockFit(host, reference, segments, len(ex), source)
