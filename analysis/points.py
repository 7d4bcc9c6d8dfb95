"""A campaign's points as numbers: each counted run of a point gives every metric one value,
the campaign's statistic of the metric's samples in that run. The runs of one point must have
run one experiment alike (pyperf's refusal to combine unlike runs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from netspec.protocol.campaignrecord import CampaignRun, Point
from netspec.protocol.errors import NetspecError

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
    record's: protocol/campaignrecord.py).

    Raises:
        UnlikeRuns: the counted runs of a point differ (`check_repetitions`).
    """
    reduce = STATISTICS[statistic]
    table: dict[str, dict[str, Metric]] = {}
    for point in points:
        runs = [r for r in point.runs if r.counted]
        check_repetitions(point.label, runs)
        values: dict[str, list[float]] = {}
        units: dict[str, str] = {}
        for r in runs:
            for name, m in run_metrics(Path(r.path or "") / MERGED).items():
                values.setdefault(name, []).append(float(reduce(m.values)))
                units[name] = m.unit
        table[point.label] = {name: Metric(name, units[name], np.array(v), np.arange(len(v)))
                                 for name, v in values.items()}
    return table
