"""Log buckets: a histogram whose bins grow by a constant factor, so that every value it
counts is known within a bounded relative error, whatever its size (HdrHistogram's idea, in
its simplest form). A histogram entity declared with `scale: log` (schema.py's namespace
spec {lo, hi, buckets, scale}) counts into these bins; its records merge exactly (the counts
of one spec add), across processes, hosts and runs, and a percentile of the merged counts
is the percentile of every value they hold, within `relative_error`.

Bin i of n covers [lo * g**i, lo * g**(i+1)), g = (hi / lo) ** (1 / n); a value is reported
as its bin's geometric middle, lo * g**(i + 1/2), which is within a factor sqrt(g) of every
value in the bin: a relative error of at most sqrt(g) - 1. Values below lo and at or above
hi are counted in the bins either side, as a linear histogram's are, and a percentile that
falls there is said as such (`Quantile.below` / `above`), never given a made-up value.

Pure Python (math, and msgspec's Structs as the rest of datastream): nodelib's entities
import it, so it imports nothing heavier.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import msgspec

LOG = "log"


def buckets_for(lo: float, hi: float, relative_error: float) -> int:
    """How many log bins over [lo, hi) keep every value within `relative_error` of its
    bin's middle."""
    if not 0 < relative_error < 1 or not 0 < lo < hi:
        raise ValueError(f"log buckets need 0 < lo < hi and 0 < relative_error < 1 (got lo={lo}, hi={hi}, "
                         f"relative_error={relative_error})")
    return max(1, math.ceil(math.log(hi / lo) / (2 * math.log1p(relative_error))))


class LogScale(msgspec.Struct, frozen=True):
    """The bins of a log histogram: `buckets` of them over [lo, hi), one either side."""

    lo: float
    hi: float
    buckets: int

    @classmethod
    def of(cls, spec: dict) -> LogScale:
        """The scale a histogram's namespace spec declares (spec['scale'] == 'log')."""
        return cls(float(spec["lo"]), float(spec["hi"]), int(spec["buckets"]))

    @property
    def growth(self) -> float:
        return (self.hi / self.lo) ** (1 / self.buckets)

    @property
    def relative_error(self) -> float:
        """The most a reported value is off from any value of its bin, relative to it."""
        return math.sqrt(self.growth) - 1

    def index(self, v: float) -> int:
        """The place of `v` among the counts: 0 below lo, 1 + its bin, buckets + 1 at or above hi."""
        if v < self.lo:
            return 0
        if v >= self.hi:
            return self.buckets + 1
        # As the entity computes it (entities.Histogram), so both put a value in one bin;
        # min(): rounding can carry a value just under hi into bin n.
        scale = self.buckets / math.log(self.hi / self.lo)
        return 1 + min(int((math.log(v) - math.log(self.lo)) * scale), self.buckets - 1)

    def middle(self, i: int) -> float:
        """The value bin i (0-based, of the `buckets`) is reported as."""
        return self.lo * self.growth ** (i + 0.5)


class Quantile(msgspec.Struct, frozen=True):
    """A percentile of a log histogram: `value` within `relative_error` of the true one, or
    beyond the scale's range (`below` lo, `above` hi: the value is not known)."""

    value: float | None
    relative_error: float
    below: bool = False
    above: bool = False


def quantile(scale: LogScale, counts: Sequence[int], q: float) -> Quantile | None:
    """The q-quantile (0 <= q <= 1, nearest rank) of the values `counts` holds; None if none."""
    total = sum(counts)
    if total == 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for i, c in enumerate(counts):
        seen += c
        if seen >= rank:
            if i == 0:
                return Quantile(None, scale.relative_error, below=True)
            if i == len(counts) - 1:
                return Quantile(None, scale.relative_error, above=True)
            return Quantile(scale.middle(i - 1), scale.relative_error)
    raise AssertionError("a rank within the total is reached")


class SpecsDiffer(ValueError):
    """Histograms of different bins, which cannot be added exactly."""


def merge(specs_and_counts: Iterable[tuple[dict, Sequence[int]]]) -> tuple[dict, list[int]]:
    """The exact sum of histograms of one spec: (the spec, the counts added bin by bin).
    Raises SpecsDiffer naming both specs where two differ, ValueError where there are none."""
    spec: dict | None = None
    total: list[int] = []
    for s, counts in specs_and_counts:
        if spec is None:
            spec, total = s, list(counts)
            continue
        if s != spec or len(counts) != len(total):
            raise SpecsDiffer(f"histograms of different bins cannot be merged exactly: {spec} and {s}")
        total = [a + b for a, b in zip(total, counts, strict=True)]
    if spec is None:
        raise ValueError("no histogram to merge")
    return spec, total
