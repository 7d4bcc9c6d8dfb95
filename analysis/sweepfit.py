"""A campaign's metrics against its one numeric swept parameter: the least-squares line of
each metric's point means, its slope with the slope's standard error, and r². The KU delay
sweep's figures read off it: a frame's delay grew 0.997 ± 0.003 ms a millisecond of link
delay, the control loop's 2.001 ± 0.019.

A time (an interval, in us) is fitted in milliseconds, as a delay is swept: its slope against
a delay is then a plain ratio (1: the metric follows the delay once; 2: twice).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .metrics import Metric

TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


@dataclass(frozen=True)
class Fit:
    metric: str
    unit: str  # the unit fitted: ms for a time, else the metric's own
    slope: float
    stderr: float  # of the slope
    intercept: float
    r2: float
    points: int


def fit(metric: str, unit: str, xs: list[float], means: list[float]) -> Fit | None:
    """The line through (xs, means); None with fewer than three points or one x."""
    x, y = np.asarray(xs, dtype=float), np.asarray(means, dtype=float)
    if len(x) < 3 or np.ptp(x) == 0:
        return None
    scale = TO_MS.get(unit)
    y, unit = (y * scale, "ms") if scale is not None else (y, unit)
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    spread = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((residual ** 2).sum()) / spread if spread else 1.0
    stderr = math.sqrt(float((residual ** 2).sum()) / (len(x) - 2) / float(((x - x.mean()) ** 2).sum()))
    return Fit(metric, unit, float(slope), stderr, float(intercept), r2, len(x))


def fits(axis_values: dict[str, float], points: dict[str, dict[str, Metric]]) -> list[Fit]:
    """Each metric's fit over the points that have it: `axis_values`, each point's (by its
    label) value of the swept parameter; the point's mean of the metric's run values."""
    found = []
    for metric in dict.fromkeys(m for ms in points.values() for m in ms):
        labels = [label for label, ms in points.items() if metric in ms and label in axis_values]
        if not labels:
            continue
        unit = points[labels[0]][metric].unit
        line = fit(metric, unit, [axis_values[label] for label in labels],
                   [float(np.mean(points[label][metric].values)) for label in labels])
        if line is not None:
            found.append(line)
    return found


def fit_lines(axis: str, axis_unit: str, found: list[Fit]) -> list[str]:
    """The report's lines: one per metric fitted."""
    if not found:
        return []
    per = f"per {axis_unit} of {axis}" if axis_unit else f"per unit of {axis}"
    lines = [f"against {axis} (least squares over the points' means):"]
    lines += [f"  {f.metric}: slope {f.slope:.3f} ± {f.stderr:.3f} {f.unit} {per}, intercept "
              f"{f.intercept:.3f} {f.unit}, r² {f.r2:.4f} ({f.points} points)" for f in found]
    return lines
