"""The operations panel (operations.parquet, analysis/operations.py): each operation's latency
over time, one trace per outcome so that failures stand apart from successes, and a row per
step, component and operation with its rate, its failures by cause, the latency of its
successes and of its failures, the longest time without a success and how late its pacer
started it; each fault's instant a dotted line, the outage after it (to the first success
asked after it) a band."""

from __future__ import annotations

from typing import Any

import duckdb
from netspec.analysis.operations import OperationFigures
from netspec.analysis.phases import SPANS_SQL, views
from netspec.analysis.units import duration_text
from netspec.datastream.schema import OUTCOMES

from .eventtable import fair_share
from .faults import outage_shapes
from .panels import step_shapes

# Points drawn at most, shared fairly among each step's outcomes: every k-th operation of a
# step and outcome past its share (the table counts them all). report.html, which carries
# its data within 2 MB, draws fewer.
POINTS = 20000
REPORT_POINTS = 5000
COLORS = {"ok": "#4c78a8", "failed": "#e45756", "timeout": "#f58518", "unknown": "#b279a2"}


def _row(f: OperationFigures) -> dict[str, Any]:
    return {"step": f.step, "phase": f.phase, "component": f.component, "name": f.name,
            "count": f.count, "rate": f"{f.rate_per_s:.1f}/s", "ok": f.ok, "failed": f.failed,
            "causes": f.failures_text() or "-",
            "ok_latency": f.ok_latency.text() if f.ok_latency else "no success",
            "failed_latency": f.failed_latency.text() if f.failed_latency else "-",
            "no_success": f"{duration_text(f.no_success_ns)} ({f.failed_in_a_row} failed in a row)",
            "lag": (f"p99 {duration_text(f.lag_p99_ns)}, max {duration_text(f.lag_max_ns)}"
                    + (f", {f.late} late" if f.late else "")) if f.lag_max_ns else "-"}


def operations(db: duckdb.DuckDBPyConnection, origin: int, figures: list[OperationFigures],
               points: int | None = None) -> dict[str, Any]:
    """The panel's figure and table; `figures` are the phases' (phase_figures). Each point
    says its time to the us and its latency to 4 digits; a failure's, its cause."""
    if "operations" not in views(db):
        return {"figure": None, "rows": [], "sampled": ""}
    # Each operation's step by its intended instant (-1: in none), as the figures count it.
    staged = f"""SELECT o.*, coalesce(s.step, -1) AS step FROM operations o
                 LEFT JOIN ({SPANS_SQL}) s ON o.intended_ts BETWEEN s.lo AND s.hi"""
    groups = db.execute(f"SELECT step, outcome, count(*) FROM ({staged}) GROUP BY ALL").fetchall()
    share = max(1, fair_share([n for *_, n in groups], POINTS if points is None else points))
    every = {(step, outcome): -(-n // share) for step, outcome, n in groups}
    sampled = [f"{outcome} in step {step}: 1 in {k}" for (step, outcome), k in sorted(every.items())
               if k > 1]
    traces = []
    for outcome in OUTCOMES:
        counts = {step: n for step, o, n in groups if o == outcome}
        if not counts:
            continue
        rows = db.execute(f"""
            SELECT round((intended_ts - $origin) / 1e6, 3), latency_ns / 1e6,
                   name || ' ' || host || '/' || component || coalesce(': ' || cause, '') FROM (
                SELECT *, row_number() OVER w AS k, count(*) OVER (PARTITION BY step) AS n
                FROM ({staged}) WHERE outcome = $outcome WINDOW w AS (PARTITION BY step ORDER BY intended_ts))
            WHERE k % CAST(ceil(n / $share) AS BIGINT) = 0 ORDER BY intended_ts""",
                          {"origin": origin, "outcome": outcome, "share": share}).fetchall()
        traces.append({"type": "scatter", "mode": "markers", "name": f"{outcome} ({sum(counts.values())})",
                       "x": [r[0] for r in rows], "y": [float(f"{r[1]:.4g}") for r in rows],
                       **({} if outcome == "ok" else {"hovertext": [r[2] for r in rows]}),
                       "marker": {"size": 4, "color": COLORS[outcome], "opacity": 0.7}})
    figure = {"data": traces, "layout": {
        "height": 320, "margin": {"t": 20, "r": 20},
        "shapes": step_shapes(db, origin) + (outage_shapes(db, origin) if "faults" in views(db) else []),
        "xaxis": {"title": {"text": "intended instant (ms from the run's start)"}},
        "yaxis": {"title": {"text": "latency from the intended instant (ms)"}, "type": "log"}}}
    return {"figure": figure if traces else None, "rows": [_row(f) for f in figures],
            "sampled": "; ".join(sampled)}
