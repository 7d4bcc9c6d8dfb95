"""What a merged result set measures, as named samples: every interval (pair or interval
record) in microseconds, each host's CPU busy % and each sampled component's CPU use."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .resultset import is_current, open_tables


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    values: np.ndarray
    at: np.ndarray  # global time of each value, ns

    def __len__(self) -> int:
        return len(self.values)


METRICS_SQL = """
SELECT 'interval ' || name AS metric, 'us' AS unit, list(duration_ns / 1e3 ORDER BY end_ts) AS v,
       list(end_ts ORDER BY end_ts) AS t
FROM intervals GROUP BY name
UNION ALL
SELECT CASE WHEN field = 'cpu.busy_pct' THEN 'cpu busy ' || host
            ELSE 'cpu of ' || regexp_extract(field, '^proc\\.(.+)\\.cpu_ns$', 1) || ' on ' || host END,
       any_value(unit), list(rate ORDER BY ts), list(ts ORDER BY ts)
FROM rates WHERE field = 'cpu.busy_pct' OR regexp_matches(field, '^proc\\..+\\.cpu_ns$')
GROUP BY host, field
"""


def run_metrics(merged: Path) -> dict[str, Metric]:
    """Every metric of the result set in `merged`, by name (intervals first, then CPU)."""
    if (merged / "summary.json").is_file() and not is_current(merged):
        raise FileNotFoundError(f"{merged}: a result set of an older netspec: merge the run again "
                                "(ns_control fetch)")
    db = open_tables(merged)
    have = {r[0] for r in db.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    if not {"intervals", "rates"} <= have:
        missing = sorted({"intervals", "rates"} - have)
        raise FileNotFoundError(f"{merged}: no {' or '.join(missing)} table: merge the run first "
                                "(ns_control fetch)")
    rows = db.execute(f"SELECT * FROM ({METRICS_SQL}) ORDER BY metric LIKE 'cpu%', metric").fetchall()
    return {name: Metric(name, unit, np.array(v, dtype=float), np.array(t, dtype=np.int64))
            for name, unit, v, t in rows}
