"""Getstats (Auto-pilot, section 3.3): summary statistics of a metric with a Student-t
confidence interval, outlier and trend warnings, and the comparison of two samples (overhead,
Welch's t-test, the confidence interval of the difference). numpy and scipy do the arithmetic.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
Z_WARN = 2.0  # Getstats's default
# A trend is a slope that moves the mean by more than this fraction across the sample.
SLOPE_WARN = 0.05


@dataclass(frozen=True)
class Summary:
    count: int
    mean: float
    median: float
    low: float  # Student-t confidence interval of the mean
    high: float
    min: float
    max: float
    sdev_pct: float  # standard deviation, % of the mean
    hw_pct: float  # the t interval's half-width, % of the mean (before any clamping)
    # The t interval ran past what the quantity can be (a percentage below 0 or above 100):
    # low and high are clamped to its bounds, and the report says so.
    clamped: bool = False

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def summarize(values: np.ndarray, confidence: float = CONFIDENCE,
              bounds: tuple[float, float] = (-math.inf, math.inf)) -> Summary:
    """Getstats's row for one metric. With fewer than two values the spread is NaN. A
    quantity that cannot leave `bounds` (a percentage: 0 to 100) has its Student-t interval
    clamped to them, and `clamped` set: with few values the t interval runs far past them."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    if n == 0:
        return Summary(0, *(math.nan,) * 8)
    mean = float(x.mean())
    if n < 2:
        low = high = sdev = math.nan
    else:
        sdev = float(x.std(ddof=1))
        low, high = ((mean, mean) if sdev == 0
                     else stats.t.interval(confidence, n - 1, mean, sdev / math.sqrt(n)))
    hw_pct = _pct((high - low) / 2, mean)
    clamped = bool(low < bounds[0] or high > bounds[1])
    low, high = max(low, bounds[0]), min(high, bounds[1])
    high = max(high, low)  # a mean itself out of bounds (a pair's durations under clock error)
    return Summary(n, mean, float(np.median(x)), float(low), float(high), float(x.min()), float(x.max()),
                   _pct(sdev, mean), hw_pct, clamped)


def _pct(part: float, whole: float) -> float:
    return 100 * part / abs(whole) if whole else math.nan


def outliers(values: np.ndarray, z: float = Z_WARN) -> list[tuple[int, float, float]]:
    """(index, value, z-score) of every value further than `z` deviations from the mean."""
    x = np.asarray(values, dtype=float)
    if len(x) < 3 or x.std(ddof=1) == 0:
        return []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        scores = stats.zscore(x, ddof=1)
    if caught:  # values equal but for rounding: no value stands out
        return []
    return [(int(i), float(x[i]), float(scores[i])) for i in np.flatnonzero(np.abs(scores) > z)]


@dataclass(frozen=True)
class Trend:
    slope: float  # per unit of `at`
    p_value: float  # of the slope being zero
    change_pct: float  # the fitted line's change across the sample, % of the mean

    @property
    def warns(self) -> bool:
        return self.p_value < 1 - CONFIDENCE and abs(self.change_pct) > 100 * SLOPE_WARN


def trend(values: np.ndarray, at: np.ndarray | None = None) -> Trend | None:
    """Least-squares slope of the values against `at` (their order by default): a leak or a
    gradual degradation shows as a significant slope."""
    y = np.asarray(values, dtype=float)
    x = np.arange(len(y), dtype=float) if at is None else np.asarray(at, dtype=float)
    if len(y) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    fit = stats.linregress(x, y)
    return Trend(float(fit.slope), float(fit.pvalue), _pct(fit.slope * np.ptp(x), float(y.mean())))


@dataclass(frozen=True)
class Comparison:
    """Sample b against baseline a."""

    overhead_pct: float  # (mean b - mean a) / mean a
    diff_low: float  # confidence interval of mean b - mean a (Welch)
    diff_high: float
    p_equal: float  # Welch's t-test, two-sided: the means are equal
    p_less: float  # one-sided: mean b <= mean a
    p_greater: float  # one-sided: mean b >= mean a
    note: str = ""  # what scipy warned of while testing (e.g. samples nearly identical)

    @property
    def differs(self) -> bool:
        return self.p_equal < 1 - CONFIDENCE


def compare(a: np.ndarray, b: np.ndarray, confidence: float = CONFIDENCE) -> Comparison | None:
    """Welch's two-sample comparison (variances not assumed equal); None with fewer than two
    values on either side."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        return None
    ma, mb = a.mean(), b.mean()
    # scipy warns on stderr of what makes its answer shaky; the report says it, once, instead.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        test = stats.ttest_ind(b, a, equal_var=False)
        ci = test.confidence_interval(confidence)
        greater = stats.ttest_ind(b, a, equal_var=False, alternative="greater").pvalue
        less = stats.ttest_ind(b, a, equal_var=False, alternative="less").pvalue
    note = "; ".join(dict.fromkeys(str(w.message).split(". ")[0] for w in caught))
    return Comparison(_pct(mb - ma, ma), float(ci.low), float(ci.high), float(test.pvalue),
                      float(greater), float(less), note)

