"""A campaign's points as numbers: each counted run of a point gives every metric one value,
the campaign's statistic of the metric's samples in that run. The runs of one point must have
run one experiment alike (pyperf's refusal to combine unlike runs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from netspec.protocol.campaignrecord import CampaignRun, Point
from netspec.protocol.errors import NetspecError

from .histograms import quantiles_text
from .metrics import Metric, run_metrics
from .provenance import differences, load
from .resultset import MERGED

STATISTICS = {"mean": np.mean, "median": np.median, "min": np.min, "max": np.max, "count": len,
              "p95": lambda v: np.percentile(v, 95), "p99": lambda v: np.percentile(v, 99)}


class UnlikeRuns(NetspecError):
    """Runs counted together that did not run one experiment alike."""


def check_repetitions(label: str, runs: list[CampaignRun]) -> None:
    """Raises UnlikeRuns unless the counted runs of the point `label` ran one experiment alike."""
    records = [load(Path(r.path or "")) for r in runs]
    for r, record in zip(runs[1:], records[1:], strict=True):
        diffs = differences(records[0], record)
        if diffs:
            raise UnlikeRuns(f"{label}: runs {runs[0].id} and {r.id} are not "
                             f"repetitions of one experiment: {'; '.join(diffs)}")


def point_metrics(points: list[Point], statistic: str) -> dict[str, dict[str, Metric]]:
    """Per point (by label), every metric as one value per counted run (`points` a campaign
    record's: protocol/campaignrecord.py). A log histogram's value in a run is the statistic
    of its bins, every host merged; its caveat gives the point's runs merged exactly, their
    percentiles and the error bound.

    Raises:
        UnlikeRuns: the counted runs of a point differ (`check_repetitions`), or their
            histograms of one name have different bins.
    """
    reduce = STATISTICS[statistic]
    table: dict[str, dict[str, Metric]] = {}
    for point in points:
        runs = [r for r in point.runs if r.counted]
        check_repetitions(point.label, runs)
        values: dict[str, list[float]] = {}
        units: dict[str, str] = {}
        histograms: dict[str, tuple[Metric, np.ndarray, int]] = {}  # name -> (first run's, counts, runs)
        for r in runs:
            for name, m in run_metrics(Path(r.path or "") / MERGED).items():
                values.setdefault(name, []).append(float(reduce(m.values)) if len(m.values) else float("nan"))
                units[name] = m.unit
                if m.histogram is not None:
                    histograms[name] = _added(point.label, name, histograms.get(name), m)
        caveats = {name: f"{runs} run(s) merged exactly: {quantiles_text(first.histogram[0], counts)}"
                   for name, (first, counts, runs) in histograms.items() if first.histogram is not None}
        table[point.label] = {name: Metric(name, units[name], np.array(v), np.arange(len(v)),
                                           caveats.get(name, "")) for name, v in values.items()}
    return table


def _added(label: str, name: str, held: tuple[Metric, np.ndarray, int] | None,
           m: Metric) -> tuple[Metric, np.ndarray, int]:
    """A run's histogram added to those of the point's runs before it."""
    assert m.histogram is not None
    if held is None:
        return m, m.histogram[1].copy(), 1
    first, counts, n = held
    assert first.histogram is not None
    if first.histogram[0] != m.histogram[0]:
        raise UnlikeRuns(f"{label}: {name}: its runs' histograms have different bins ({first.histogram[0]} "
                         f"and {m.histogram[0]}): they cannot be merged exactly")
    return first, counts + m.histogram[1], n + 1
