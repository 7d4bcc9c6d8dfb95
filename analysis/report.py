"""Getstats's tabular report over one or more runs' metrics: a table per run, the first run
the baseline of the others (O/H %, "~" where Welch's test cannot tell it from noise), each
later run compared with the baseline, then the warnings grouped by run. As text for people,
or as CSV rows."""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass, fields
from typing import IO

from .metrics import Metric, unit_bounds
from .stats import CONFIDENCE, Comparison, Summary, compare, outliers, trend

MAX_OUTLIERS_SHOWN = 3


@dataclass(frozen=True)
class Row:
    run: str
    metric: str
    unit: str
    summary: Summary
    against: Comparison | None  # None for the baseline run, or a metric it lacks


def rows(runs: dict[str, dict[str, Metric]]) -> list[Row]:
    """A row per run and metric; runs after the first are compared with it."""
    base_name, base = next(iter(runs.items()))
    out = []
    for run, metrics in runs.items():
        for name, m in metrics.items():
            vs = compare(base[name].values, m.values) if run != base_name and name in base else None
            out.append(Row(run, name, m.unit, m.summary(), vs))
    return out


def warnings(runs: dict[str, dict[str, Metric]], table: list[Row]) -> list[str]:
    """Caveats, high z-scores, significant trends, clamped intervals and shaky tests, grouped
    by run, after the tables."""
    by_run: dict[str, list[str]] = {}
    for run, metrics in runs.items():
        for name, m in metrics.items():
            if m.caveat:
                by_run.setdefault(run, []).append(f"{name}: {m.caveat}")
            far = outliers(m.values)
            if far:
                worst = sorted(far, key=lambda o: -abs(o[2]))[:MAX_OUTLIERS_SHOWN]
                shown = ", ".join(f"#{i} {v:.4g} (z {z:+.1f})" for i, v, z in worst)
                by_run.setdefault(run, []).append(
                    f"{name}: {len(far)} of {len(m)} values beyond z 2: {shown}")
            if drifts := _drifts(name, m):  # a run with nothing to say gets no heading
                by_run.setdefault(run, []).extend(drifts)
    for r in table:
        if r.summary.clamped:
            by_run.setdefault(r.run, []).append(_clamped(r))
        if r.against is not None and r.against.note:
            by_run.setdefault(r.run, []).append(f"{r.metric}: against the baseline, scipy: {r.against.note}: "
                                                "its p-value is not to be trusted")
    lines = [f"warnings: {sum(map(len, by_run.values()))}"] if by_run else []
    for run, texts in by_run.items():
        lines.append(f"  {run}:")
        lines.extend(f"    {t}" for t in texts)
    return lines


def _drifts(name: str, m: Metric) -> list[str]:
    """A significant slope within a phase (or across the run, where the metric has no phases):
    a change from one phase to the next is the schedule's, not a leak. A histogram's values
    have no time order: none."""
    if m.histogram is not None:
        return []
    if not m.phases:
        t = trend(m.values, m.at)
        return [f"{name}: drifts {t.change_pct:+.1f} % of its mean across the run (slope p "
                f"{t.p_value:.2g}): a leak or a gradual degradation?"] if t is not None and t.warns else []
    out = []
    for label, lo, hi in m.phases:
        inside = (m.at >= lo) & (m.at <= hi)
        t = trend(m.values[inside], m.at[inside])
        if t is not None and t.warns:
            out.append(f"{name}: drifts {t.change_pct:+.1f} % of its mean within phase {label} (slope p "
                       f"{t.p_value:.2g}): a leak or a gradual degradation?")
    return out


def _clamped(r: Row) -> str:
    low, high = unit_bounds(r.unit)
    limits = f"{low:g} to {high:g} {r.unit}" if math.isfinite(high) else f"at least {low:g} {r.unit}"
    few = f" (n = {r.summary.count}: more values narrow it)" if r.summary.count < 10 else ""
    ends = [name for name, end, bound in (("LOW", r.summary.low, low), ("HIGH", r.summary.high, high))
            if end == bound]
    return (f"{r.metric}: its {100 * CONFIDENCE:.0f} % t interval runs past what it can be ({limits}): "
            f"{' and '.join(ends)} {'are' if len(ends) > 1 else 'is'} clamped there{few}")


COLUMNS = ("COUNT", "MEAN", "MEDIAN", "LOW", "HIGH", "MIN", "MAX", "SDEV%", "HW%")


def _number(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.4g}"


def table_lines(table: list[Row]) -> list[str]:
    """Getstats's layout: per run a block of NAME COUNT MEAN ... HW% [O/H%]."""
    lines = []
    width = max((len(f"{r.metric} ({r.unit})") for r in table), default=4)
    for run in dict.fromkeys(r.run for r in table):
        block = [r for r in table if r.run == run]
        with_oh = any(r.against for r in block)
        lines.append(run)
        lines.append(f"  {'NAME':<{width}} " + " ".join(f"{c:>9}" for c in COLUMNS)
                     + (f" {'O/H%':>9}" if with_oh else ""))
        for r in block:
            s = r.summary
            cells = [str(s.count), *map(_number, (s.mean, s.median, s.low, s.high, s.min, s.max, s.sdev_pct,
                                                  s.hw_pct))]
            if with_oh:
                # An overhead Welch's test cannot tell from noise is not shown as a number.
                cells.append("-" if not r.against else
                             _number(r.against.overhead_pct) if r.against.differs else "~")
            lines.append(f"  {r.metric + ' (' + r.unit + ')':<{width}} " + " ".join(f"{c:>9}" for c in cells))
    return lines


def comparison_lines(table: list[Row]) -> list[str]:
    base = table[0].run if table else ""
    lines = []
    for r in table:
        if r.against is None:
            continue
        c = r.against
        verdict = "differ" if c.differs else "are indistinguishable"
        lines.append(f"{r.run} against {base}: {r.metric}: 95% CI of the difference "
                     f"({_number(c.diff_low)}, {_number(c.diff_high)}) {r.unit}; Welch p {c.p_equal:.3g} "
                     f"(b<=a: {c.p_less:.3g}, b>=a: {c.p_greater:.3g}): they {verdict}")
    return lines


def report_lines(runs: dict[str, dict[str, Metric]]) -> list[str]:
    """The tables, each later run against the first, then the warnings, then what could not
    be reported or compared (a run with no metric, a metric the first run has not)."""
    table = rows(runs)
    return [*table_lines(table), *comparison_lines(table), *warnings(runs, table), *left_out(runs)]


def left_out(runs: dict[str, dict[str, Metric]]) -> list[str]:
    """A line for each run with no metric and each metric the baseline (the first run) has not."""
    base_name, base = next(iter(runs.items()))
    lines = [f"{run}: no metric to report (no interval, pair or CAMP counter in its result set)"
             for run, metrics in runs.items() if not metrics]
    lines += [f"{run}: {name} is not in {base_name}, the first run: not compared"
              for run, metrics in runs.items() if run != base_name for name in metrics if name not in base]
    return lines


def write_csv(runs: dict[str, dict[str, Metric]], out: IO[str]) -> None:
    names = [f.name for f in fields(Summary)]
    diff = [f.name for f in fields(Comparison)]
    w = csv.writer(out)
    w.writerow(["run", "metric", "unit", *names, *diff])
    for r in rows(runs):
        against = asdict(r.against) if r.against else {}
        w.writerow([r.run, r.metric, r.unit, *(getattr(r.summary, n) for n in names),
                    *(against.get(n, "") for n in diff)])
