"""A host's timestamps onto the global timeline, compiled: one pass per batch through the
host's clock fit, with the arithmetic of `ClockFit.to_global` (clksync.fit) record for
record. clksync keeps its numpy version, for the few times the result set converts (phase
boundaries) and for clksync's bench and tests: the daemon imports clksync.fit for its
clock gate, and must not load numba. The numpy version costs 80-170 ns a record, this one
11-23.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
from netspec.clksync.fit import ClockFit


@numba.njit(cache=True, nogil=True)
def _knot_before(at, a, b, x, hint):
    """The last knot in at[a:b] at or before x (a if none is), looking first at `hint`."""
    if a <= hint < b and at[hint] <= x and (hint + 1 == b or x < at[hint + 1]):
        return hint
    i = a + np.searchsorted(at[a:b], x, side="right") - 1
    return max(i, a)


@numba.njit(cache=True, nogil=True)
def _to_global(local, starts, first, at, offset, lo, hi, drift, ts, bound):
    """Per record: the fit's offset and its lowest and highest value at the host time, then
    the global time and its bound. drift[k] holds knot k's drift, drift_lo and drift_hi, used
    beyond a segment's first or last knot."""
    segments = len(starts)
    k = 0
    for r in range(len(local)):
        x = local[r]
        s = min(max(np.searchsorted(starts, x, side="right") - 1, 0), segments - 1)
        a, b = first[s], first[s + 1]
        if x < at[a] or x > at[b - 1]:
            edge = a if x < at[a] else b - 1
            d = float(x - at[edge])
            off = offset[edge] + np.int64(np.rint(drift[edge, 0] * d))
            low = lo[edge] + np.int64(np.floor(min(drift[edge, 1] * d, drift[edge, 2] * d)))
            high = hi[edge] + np.int64(np.ceil(max(drift[edge, 1] * d, drift[edge, 2] * d)))
        else:
            k = _knot_before(at, a, b, x, k)
            j = min(k + 1, b - 1)
            span = float(at[j] - at[k])
            frac = min(max(float(x - at[k]) / span, 0.0), 1.0) if span > 0 else 0.0
            off = offset[k] + np.int64(np.rint(frac * float(offset[j] - offset[k])))
            low = lo[k] + np.int64(np.rint(frac * float(lo[j] - lo[k])))
            high = hi[k] + np.int64(np.rint(frac * float(hi[j] - hi[k])))
        ts[r] = x - off
        bound[r] = max(high - off, off - low)


@dataclass(frozen=True)
class CompiledFit:
    """A usable ClockFit's segments as flat arrays: knots first[s]:first[s + 1] are segment s's."""

    starts: np.ndarray
    first: np.ndarray
    at: np.ndarray
    offset: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    drift: np.ndarray  # (knots, 3): drift, drift_lo, drift_hi

    @classmethod
    def of(cls, fit: ClockFit) -> CompiledFit | None:
        """The compiled fit, or None for the reference host, whose times are already global."""
        if fit.source == "reference":
            return None
        if not fit.segments:
            raise ValueError(f"host {fit.host}: no clock exchanges with {fit.reference} to fit")
        knots = [k for s in fit.segments for k in s.knots]
        sizes = [len(s.knots) for s in fit.segments]
        return cls(starts=np.array([s.start for s in fit.segments], dtype=np.int64),
                   first=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                   at=np.concatenate([s.at for s in fit.segments]),
                   offset=np.concatenate([s.offset for s in fit.segments]),
                   lo=np.concatenate([s.lo for s in fit.segments]),
                   hi=np.concatenate([s.hi for s in fit.segments]),
                   drift=np.array([(k.drift, k.drift_lo, k.drift_hi) for k in knots], dtype=np.float64))

    def to_global(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Reference-clock time of each host timestamp and the bound its error lies within."""
        local = np.ascontiguousarray(local, dtype=np.int64)
        ts, bound = np.empty_like(local), np.empty_like(local)
        _to_global(local, self.starts, self.first, self.at, self.offset, self.lo, self.hi, self.drift,
                   ts, bound)
        return ts, bound
