"""What a merged result set measures, as named samples: every interval (pair or interval
record) in microseconds, every operation's latency of its successes (us) and its share of
failures (%), every log histogram (its values as its bins' middles, within its relative
error: the caveat says it), each host's CPU busy % and each sampled component's CPU use."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .histograms import run_histograms
from .phases import spans
from .resultset import SUMMARY, is_current, open_tables, read_summary

if TYPE_CHECKING:
    from netspec.datastream.loghist import LogScale

    from .stats import Summary

# What a metric of each unit can be: a percentage 0 to 100, CPUs in use and a duration (an
# interval's, in us) never below 0.
UNIT_BOUNDS = {"%": (0.0, 100.0), "cpus": (0.0, math.inf), "us": (0.0, math.inf)}


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    values: np.ndarray
    at: np.ndarray  # global time of each value, ns
    caveat: str = ""  # what makes its values other than they seem (a host sharing its kernel)
    # The run's steps as (label, start, end), global ns: its trend is judged within each (a
    # phase change is not a drift). Empty: judged over the whole sample (a campaign's metric).
    phases: tuple[tuple[str, int, int], ...] = ()
    # A log histogram's (histograms.py): its bins and counts, every host merged; `values`
    # are the bins' middles, so a campaign merges a point's runs from these exactly.
    histogram: tuple[LogScale, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.values)

    def summary(self) -> Summary:
        """Its Getstats row, the interval clamped to what its unit can be."""
        from .stats import summarize  # scipy: only for what summarises

        return summarize(self.values, bounds=unit_bounds(self.unit))


def unit_bounds(unit: str) -> tuple[float, float]:
    """What a value in `unit` can be (a summary's interval is clamped to it)."""
    return UNIT_BOUNDS.get(unit, (-math.inf, math.inf))


INTERVALS_SQL = """
SELECT 'interval ' || name AS metric, 'us' AS unit, list(duration_ns / 1e3 ORDER BY end_ts) AS v,
       list(end_ts ORDER BY end_ts) AS t
FROM intervals GROUP BY name
"""
OPERATIONS_SQL = """
SELECT 'operation ' || name || ' ok latency', 'us', list(latency_ns / 1e3 ORDER BY intended_ts),
       list(intended_ts ORDER BY intended_ts)
FROM operations WHERE outcome = 'ok' GROUP BY name
UNION ALL
SELECT 'operation ' || name || ' failed', '%', [100 * count(*) FILTER (outcome <> 'ok') / count(*)],
       [max(end_ts)]
FROM operations GROUP BY name
"""
PACKETS_SQL = """
SELECT 'packets ' || src_host || ' -> ' || dst_host || ' one way', 'us',
       list(one_way_ns / 1e3 ORDER BY sent_ts), list(sent_ts ORDER BY sent_ts)
FROM packets WHERE matched GROUP BY src_host, dst_host
"""
CPU_SQL = """
SELECT CASE WHEN field = 'cpu.busy_pct' THEN 'cpu busy ' || host
            ELSE 'cpu of ' || regexp_extract(field, '^proc\\.(.+)\\.cpu_ns$', 1) || ' on ' || host END,
       any_value(unit), list(rate ORDER BY ts), list(ts ORDER BY ts)
FROM rates WHERE field = 'cpu.busy_pct' OR regexp_matches(field, '^proc\\..+\\.cpu_ns$')
GROUP BY host, field
"""


def run_metrics(merged: Path) -> dict[str, Metric]:
    """Every metric of the result set in `merged`, by name (intervals first, then CPU)."""
    if (merged / SUMMARY).is_file() and not is_current(merged):
        raise FileNotFoundError(f"{merged}: a result set of an older netspec: merge the run again "
                                "(ns_control fetch)")
    db = open_tables(merged)
    have = {r[0] for r in db.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    if not {"intervals", "rates"} <= have:
        missing = sorted({"intervals", "rates"} - have)
        raise FileNotFoundError(f"{merged}: no {' or '.join(missing)} table: merge the run first "
                                "(ns_control fetch)")
    sql = " UNION ALL ".join([INTERVALS_SQL, *([OPERATIONS_SQL] if "operations" in have else []),
                              *([PACKETS_SQL] if "packets" in have else []), CPU_SQL])
    rows = db.execute(f"SELECT * FROM ({sql}) ORDER BY metric LIKE 'cpu%', metric").fetchall()
    caveats = _shared_kernel_caveats(merged)
    steps = tuple((f"{phase} (step {step})", lo, hi) for step, phase, lo, hi, _, _ in spans(db))
    metrics = {name: Metric(name, unit, np.array(v, dtype=float), np.array(t, dtype=np.int64),
                            caveats.get(name, ""), steps)
               for name, unit, v, t in rows}
    for name, (scale, counts, sources) in run_histograms(db).items():
        middles = np.array([scale.middle(i) for i in range(scale.buckets)])
        inside = counts[1:-1]
        metrics[f"histogram {name}"] = Metric(
            f"histogram {name}", "", np.repeat(middles, inside), np.zeros(int(inside.sum()), dtype=np.int64),
            histogram_caveat(scale, counts, sources), histogram=(scale, counts))
    return metrics


def histogram_caveat(scale: LogScale, counts: np.ndarray, sources: int, runs: int = 1) -> str:
    """What a log histogram's values are: its bins' middles, each within the relative error;
    and how many of its values fell outside its bins, which no value stands for."""
    outside = int(counts[0] + counts[-1])
    return (f"from a log histogram of {sources} source(s)" + (f" and {runs} runs" if runs > 1 else "")
            + f" merged exactly: each value within {100 * scale.relative_error:.2g} % (its bin's middle)"
            + (f"; {outside} value(s) below {scale.lo:.4g} or at or above {scale.hi:.4g} left out" if outside
               else ""))


def _shared_kernel_caveats(merged: Path) -> dict[str, str]:
    """The caveat of each host's CPU busy % where the host shares one kernel with others (the
    result set's summary.json says which): it is the whole machine's."""
    summary = read_summary(merged)
    caveats = {}
    for hosts in summary.shared_kernel if summary else []:
        for host in hosts:
            others = ", ".join(h for h in hosts if h != host)
            caveats[f"cpu busy {host}"] = (f"host {host} shares one kernel with {others}: this is the whole "
                                           "machine's CPU, not the host's own")
    return caveats
