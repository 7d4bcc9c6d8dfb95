"""The browser's statistics over several runs: a campaign's matrix of sweep points by metrics
(each cell a mean with its 95 % interval over the point's counted runs, Welch against the
first point), and two runs compared step by step and metric by metric. Like pyperf, both
say first what differs between the runs they put side by side."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from netspec.analysis.machines import machines, once_per_machine
from netspec.analysis.metrics import run_metrics, unit_bounds
from netspec.analysis.phases import CPU_FIELDS
from netspec.analysis.points import UnlikeRuns, point_metrics
from netspec.analysis.provenance import differences, host_facts, load
from netspec.analysis.resultset import MERGED, open_tables
from netspec.analysis.stats import compare, summarize
from netspec.analysis.units import duration_text, time_unit
from netspec.protocol.campaignrecord import CampaignRecord, Point
from netspec.protocol.runrecord import RunRecord
from scipy import stats

from .pages import plain
from .panels import TITLE_LEFT, cpu_caveats
from .timeline import bars

ECDF_POINTS = 101


def _number(value: float, unit: str) -> str:
    if value is None or math.isnan(value):
        return "-"
    if unit == "us":  # an interval metric: in the unit that suits its size
        return duration_text(value * 1e3)
    return f"{plain(value)} {unit}".strip()


def in_one_unit(values: list[float], unit: str) -> tuple[list[str], str]:
    """Several values of one metric in one unit (that which suits the first): the figures
    without their unit, and the unit."""
    if unit != "us":
        return [plain(v) for v in values], unit
    name, scale = time_unit([values[0] * 1e3])
    return [plain(v * 1e3 / scale) for v in values], name


def _cell(values: np.ndarray, unit: str, baseline: np.ndarray | None) -> dict[str, Any]:
    s = summarize(values, bounds=unit_bounds(unit))
    (mean, low, high), shown = in_one_unit([s.mean, s.low, s.high], unit)
    cell = {"n": s.count, "mean": s.mean, "low": s.low, "high": s.high,
            "text": f"{mean} {shown}".strip(),
            "interval": "" if math.isnan(s.low) else f"[{low}, {high}] {shown}".strip(),
            "verdict": "baseline" if baseline is None else "n/a", "p": None}
    if baseline is not None:
        c = compare(baseline, values)
        if c is not None:
            cell.update(p=c.p_equal, overhead_pct=float(c.overhead_pct),
                        verdict=("higher" if c.overhead_pct > 0 else "lower") if c.differs else "same")
    return cell


def campaign_view(record: CampaignRecord, run_ref: Callable[[str], str | None]) -> dict[str, Any]:
    """A campaign's record as its page shows it: a row per sweep point with its runs and a cell
    per metric, the baseline (first point), and a line per metric over a single numeric parameter."""
    repeat = (yaml.safe_load(record.text) or {}).get("repeat") or {}
    statistic = repeat.get("statistic", "median")
    points = record.points
    problem = ""
    try:
        table = point_metrics(points, statistic)
    except (UnlikeRuns, FileNotFoundError) as exc:
        table, problem = {}, str(exc)
    metrics = list(dict.fromkeys(m for ms in table.values() for m in ms))
    baseline = table.get(points[0].label, {}) if points else {}
    rows = []
    for i, point in enumerate(points):
        mine = table.get(point.label, {})
        cells = {}
        for m in metrics:
            if m in mine:
                base = None if i == 0 or m not in baseline else baseline[m].values
                cells[m] = _cell(mine[m].values, mine[m].unit, base)
        rows.append({"label": point.label, "params": point.params, "done": point.done,
                     "cells": cells, "runs": [
                         {"id": r.id, "ref": run_ref(r.path) if r.path else None, "status": r.status,
                          "counted": r.counted, "value": r.value, "warmup": r.warmup} for r in point.runs]})
    return {"statistic": statistic, "metric": repeat.get("metric"), "metrics": metrics, "rows": rows,
            "better": {m: better(m) for m in metrics},
            "problem": problem, "lines": _lines(points, table, metrics)}


def _lines(points: list[Point], table: dict[str, Any], metrics: list[str]) -> list[dict[str, Any]]:
    """Each metric over the one swept parameter, where there is one and it is numeric."""
    keys = {k for p in points for k in p.params}
    if len(keys) != 1:
        return []
    axis = next(iter(keys))
    if not all(isinstance(p.params.get(axis), int | float) for p in points):
        return []
    figures = []
    for m in metrics:
        xs, ys, lo, hi, unit = [], [], [], [], ""
        for p in points:
            metric = table.get(p.label, {}).get(m)
            if metric is None or not len(metric):
                continue
            s = metric.summary()
            xs.append(p.params[axis])
            ys.append(s.mean)
            lo.append(0 if math.isnan(s.low) else s.mean - s.low)
            hi.append(0 if math.isnan(s.high) else s.high - s.mean)
            unit = metric.unit
        direction = better(m)
        figures.append({"metric": m, "better": direction, "figure": {"data": [{
            "type": "scatter", "mode": "lines+markers", "x": xs, "y": ys, "name": m,
            "error_y": {"type": "data", "symmetric": False, "array": hi, "arrayminus": lo}}],
            "layout": {"height": 280, "margin": {"t": 50, "r": 10},
                       "title": {"text": m + (f" ({direction} is better)" if direction else ""),
                                 "font": {"size": 12}, **TITLE_LEFT},
                       "xaxis": {"title": {"text": axis + (" (log)" if geometric(xs) else "")},
                                 **({"type": "log"} if geometric(xs) else {})},
                       "yaxis": {"title": {"text": f"mean ({unit})"}}}}})
    return figures


def better(metric: str) -> str | None:
    """Which direction is better for a metric netspec names: a duration (an interval or a
    pair) and CPU use are better lower; None where netspec cannot tell."""
    return "lower" if metric.startswith(("interval ", "cpu busy ", "cpu of ")) else None


def geometric(xs: list[float]) -> bool:
    """A sweep whose values grow by a factor (64, 256, 1024, ...): drawn on a log axis. Every
    value positive, spanning a factor of 10 or more, and no step between neighbours more than
    4x another's (in ratio)."""
    values = sorted(set(xs))
    if len(values) < 2 or values[0] <= 0 or values[-1] / values[0] < 10:
        return False
    ratios = [b / a for a, b in itertools.pairwise(values)]
    return max(ratios) <= 4 * min(ratios) if len(ratios) > 1 else True


def _step_takes(record: RunRecord) -> dict[int, list[int]]:
    takes: dict[int, list[int]] = {}
    for b in bars(record):
        if b.took_ns is not None:
            takes.setdefault(b.step, []).append(b.took_ns)
    return takes


def _usage(run: Path) -> tuple[dict[tuple[int, str], float], list[str]]:
    """CPU (cpus) and network (B/s) per step over the run's machines, and what the CPU figures
    are to be read with. Hosts on one kernel see one machine's counters each: the machine is
    counted once (their mean), not once per host; a host's CPU figure is at most its CPUs."""
    merged = run / MERGED
    if not (merged / "usage.parquet").is_file():
        return {}, []
    db = open_tables(merged)
    try:
        rows = db.execute(f"""
            SELECT step, host, CASE WHEN field LIKE 'cpu.%' THEN 'cpu' ELSE 'net' END AS kind,
                   sum(per_s / CASE WHEN field LIKE 'cpu.%' THEN 1e9 ELSE 1 END)
            FROM usage WHERE per_s IS NOT NULL AND ({CPU_FIELDS} OR field LIKE 'net.%.bytes_%')
            GROUP BY step, host, kind""").fetchall()
        hosts = machines(db, host_facts(run, {host for _, host, _, _ in rows}))
    finally:
        db.close()
    caveats = cpu_caveats(hosts)
    cpu_of = {h: min(group) for group in hosts.cpu_shared for h in group}
    values: dict[tuple[int, str], dict[str, float]] = {}
    capped = 0
    for step, host, kind, value in rows:
        if kind == "cpu" and host in hosts.cpus and value > hosts.cpus[host]:
            value, capped = hosts.cpus[host], capped + 1
        values.setdefault((step, kind), {})[host] = value
    if capped:
        caveats.append(f"{capped} CPU figure(s) measured above their host's CPUs (a counter's sampling "
                       "window straddles a short step) are counted at the host's CPUs")
    return {(step, kind): once_per_machine(v, cpu_of if kind == "cpu" else hosts.net_of)
            for (step, kind), v in values.items()}, caveats


def compare_runs(a: Path, b: Path) -> dict[str, Any]:
    """Run b against run a: what differs between them, each step's duration (and Welch over
    its participants' durations), each metric's distribution, and resource use per step."""
    ra, rb = load(a), load(b)
    steps_a, steps_b = ra.record.steps, rb.record.steps
    takes_a, takes_b = _step_takes(ra.record), _step_takes(rb.record)
    (usage_a, caveats_a), (usage_b, caveats_b) = _usage(a), _usage(b)
    steps = []
    aligned = 0
    for i, (sa, sb) in enumerate(zip(steps_a, steps_b, strict=False)):
        if sa.phase != sb.phase:
            break
        aligned += 1
        da, db_ = sa.duration_s, sb.duration_s
        c = (compare(np.array(takes_a.get(i, [])), np.array(takes_b.get(i, [])))
             if takes_a.get(i) and takes_b.get(i) else None)
        steps.append({
            "step": i, "phase": sa.phase, "status": f"{sa.status} / {sb.status}",
            "a": duration_text(da * 1e9) if da is not None else "-",
            "b": duration_text(db_ * 1e9) if db_ is not None else "-",
            "diff": duration_text((db_ - da) * 1e9) if da is not None and db_ is not None else "-",
            "diff_pct": round(100 * (db_ - da) / da, 1) if da and db_ is not None else None,
            "participants_p": None if c is None else c.p_equal,
            "verdict": "n/a" if c is None else (("slower" if c.overhead_pct > 0 else "faster")
                                                if c.differs else "same"),
            "cpu": [usage_a.get((i, "cpu")), usage_b.get((i, "cpu"))],
            "net": [usage_a.get((i, "net")), usage_b.get((i, "net"))]})
    unaligned = max(len(steps_a), len(steps_b)) - aligned
    metrics = []
    try:
        ma, mb = run_metrics(a / MERGED), run_metrics(b / MERGED)
    except FileNotFoundError as exc:
        ma, mb, missing = {}, {}, str(exc)
    else:
        missing = ""
    for name in [n for n in ma if n in mb]:
        unit = ma[name].unit
        sa, sb = summarize(ma[name].values), summarize(mb[name].values)
        m = median_test(ma[name].values, mb[name].values)
        metrics.append({
            "metric": name, "unit": unit, "a": _number(sa.median, unit),
            "b": _number(sb.median, mb[name].unit), "a_mean": _number(sa.mean, unit),
            "b_mean": _number(sb.mean, mb[name].unit), "n": [sa.count, sb.count],
            "overhead_pct": None if m is None else m.pct, "p": None if m is None else m.p,
            "interval": "" if m is None else _interval(m, unit),
            "verdict": NO_TEST if m is None else m.verdict,
            "ecdf": _ecdf(name, ma[name].values, mb[name].values, ma[name].unit)})
    only = sorted(set(ma) ^ set(mb))
    return {"differences": differences(ra, rb), "steps": steps, "unaligned": unaligned, "metrics": metrics,
            "only_in_one": only, "missing": missing, "caveats": [*dict.fromkeys(caveats_a + caveats_b)],
            "resamples": BOOTSTRAP_RESAMPLES}


# The interval of a difference of medians: this many bootstrap resamples, of at most
# BOOTSTRAP_VALUES values a side (a random subsample of more, seeded: the page is the same
# each time it is drawn).
BOOTSTRAP_RESAMPLES, BOOTSTRAP_VALUES, SIGNIFICANCE = 1000, 2000, 0.05


@dataclass(frozen=True)
class MedianTest:
    """b against a on their medians: the difference (b - a, and in % of a), its 95 % bootstrap
    interval, Mann-Whitney U's two-sided p, and the verdict: higher or lower only where the
    test finds a difference and the interval excludes 0 on the side the medians moved."""

    diff: float
    pct: float | None
    low: float
    high: float
    p: float

    @property
    def verdict(self) -> str:
        if self.p >= SIGNIFICANCE or self.low <= 0 <= self.high:
            return "same"
        if self.diff > 0 and self.low > 0:
            return "higher"
        if self.diff < 0 and self.high < 0:
            return "lower"
        return "same"


NO_TEST = "not compared: fewer than two values in a run"


def median_test(a: np.ndarray, b: np.ndarray) -> MedianTest | None:
    """Compare b with a on the statistic the page shows, the median; None with fewer than two
    values a side."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2:
        return None
    rng = np.random.default_rng(0)
    ma, mb = float(np.median(a)), float(np.median(b))
    p = float(stats.mannwhitneyu(b, a, alternative="two-sided").pvalue)
    sa, sb = (x if len(x) <= BOOTSTRAP_VALUES else rng.choice(x, BOOTSTRAP_VALUES, replace=False)
              for x in (a, b))
    boot = (np.median(rng.choice(sb, (BOOTSTRAP_RESAMPLES, len(sb))), axis=1)
            - np.median(rng.choice(sa, (BOOTSTRAP_RESAMPLES, len(sa))), axis=1))
    low, high = (float(v) for v in np.percentile(boot, [2.5, 97.5]))
    return MedianTest(mb - ma, round(100 * (mb - ma) / ma, 2) if ma else None, low, high, p)


def _interval(m: MedianTest, unit: str) -> str:
    (low, high), shown = in_one_unit([m.low, m.high], unit)
    return f"[{low}, {high}] {shown}".strip()


def _ecdf(name: str, a: np.ndarray, b: np.ndarray, unit: str) -> dict[str, Any]:
    """Both runs' distributions of a metric as ECDFs on one axis (ECDF_POINTS quantiles each),
    so a shift, a spread or a tail shows where a table of medians hides it."""
    q = np.linspace(0, 1, ECDF_POINTS)
    scale, shown = (1e3, "ms") if unit == "us" and max(np.median(a), np.median(b)) >= 1e3 else (1.0, unit)
    return {"data": [{"type": "scatter", "mode": "lines", "line": {"shape": "hv"}, "name": run,
                      "x": (np.quantile(v, q) / scale).tolist() if len(v) else [], "y": q.tolist()}
                     for run, v in (("a", a), ("b", b))],
            "layout": {"height": 260, "margin": {"t": 30, "r": 10},
                       "title": {"text": name, "font": {"size": 12}, **TITLE_LEFT},
                       "xaxis": {"title": {"text": shown}, "exponentformat": "none"},
                       "yaxis": {"title": {"text": "fraction at or below"}, "range": [0, 1.02]}}}
