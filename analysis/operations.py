"""Operations: the programs' requests with their outcomes (nodelib.operation), as
merged/operations.parquet on the global timeline, and their figures per phase and component:
the rate, successes and failures by cause, the latency of successes and of failures apart,
the longest time without a success and the most failures in a row, and how late a pacer
started them. `report`, the browser and netspec.results read them here.

An operation belongs to the step its intended instant (its start where none was intended)
falls in: what was asked during a partition is the partition's, whenever it timed out. One
that falls in no step is counted apart (`outside_steps`), never dropped unsaid.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
from netspec.datastream.schema import OUTCOMES

from .units import duration_text

# A pacer's operation that started this much after its intended instant is late.
LATE_NS = 1_000_000

_OUTCOME = "CASE tag " + " ".join(f"WHEN {i} THEN '{o}'" for i, o in enumerate(OUTCOMES)) + " END"
_LAG = "CAST(json_extract(data, '$.lag_ns') AS BIGINT)"
OPERATIONS_SQL = f"""
SELECT entity AS name, host, component, {_OUTCOME} AS outcome, json_extract_string(data, '$.cause') AS cause,
       "start" AS intended_ts, "start" + {_LAG} AS start_ts, ts AS end_ts, value_int AS latency_ns,
       {_LAG} AS lag_ns, value_int - {_LAG} AS service_ns, bound_ns
FROM events WHERE kind = 'operation'
"""


# operations.parquet's columns, in order (docs/results.md says each).
COLUMNS = ("name", "host", "component", "outcome", "cause", "intended_ts", "start_ts", "end_ts", "latency_ns",
           "lag_ns", "service_ns", "bound_ns")


def write_operations(db: duckdb.DuckDBPyConnection, out: Path) -> int:
    """merged/operations.parquet from the operation records; returns its rows (no file
    where the run logged none)."""
    n = db.execute("SELECT count(*) FROM events WHERE kind = 'operation'").fetchall()[0][0]
    if n:
        path = str(out / "operations.parquet").replace("'", "''")
        db.execute(f"COPY (SELECT * FROM ({OPERATIONS_SQL}) ORDER BY intended_ts) TO '{path}' "
                   "(FORMAT parquet)")
    return n


@dataclass(frozen=True)
class Latencies:
    count: int
    p50_ns: float
    p99_ns: float
    max_ns: float

    def text(self) -> str:
        return (f"p50 {duration_text(self.p50_ns)}, p99 {duration_text(self.p99_ns)}, "
                f"max {duration_text(self.max_ns)}")


@dataclass(frozen=True)
class OperationFigures:
    """One operation's figures in one step, for one component (`host/component`)."""

    step: int
    phase: str
    component: str
    name: str
    count: int
    ok: int
    phase_ns: int  # the step's span, which the rate is over
    ok_latency: Latencies | None
    failed_latency: Latencies | None  # every outcome but ok
    failures: tuple[tuple[str, str, int], ...]  # (outcome, cause, count), the commonest first
    # The longest time without a success, from its first operation's instant to its last end.
    no_success_ns: int
    no_success_from_ns: int  # where that began (global)
    failed_in_a_row: int
    lag_p99_ns: float
    lag_max_ns: int
    late: int  # operations that started more than LATE_NS after their intended instant

    @property
    def rate_per_s(self) -> float:
        return self.count / (self.phase_ns / 1e9) if self.phase_ns > 0 else float("nan")

    @property
    def failed(self) -> int:
        return self.count - self.ok

    def failures_text(self) -> str:
        return ", ".join(f"{outcome}{': ' + cause if cause else ''} x{n}"
                         for outcome, cause, n in self.failures)

    def lines(self) -> list[str]:
        """`report`'s lines of it."""
        failures = f" ({self.failures_text()})" if self.failures else ""
        head = (f"{self.name} on {self.component}: {self.count} operations, {self.rate_per_s:.1f}/s, "
                f"{self.ok} ok, {self.failed} failed{failures}")
        latency = [f"ok {self.ok_latency.text()}" if self.ok_latency else "no success",
                   *([f"failed {self.failed_latency.text()}"] if self.failed_latency else [])]
        run = (f"longest without a success {duration_text(self.no_success_ns)}, "
               f"{self.failed_in_a_row} failed in a row")
        lag = (f"pacer lag p99 {duration_text(self.lag_p99_ns)}, max {duration_text(self.lag_max_ns)}"
               + (f": {self.late} started more than {duration_text(LATE_NS)} late, their latency counted "
                  "from the intended instant" if self.late else ""))
        return [head, "  latency " + "; ".join(latency), f"  {run}" + (f"; {lag}" if self.lag_max_ns else "")]


def _latencies(where: str) -> str:
    """The count, p50, p99 and max of the latencies of the operations `where` says."""
    return ", ".join(f"{f} FILTER ({where})" for f in (
        "count(*)", "quantile_cont(latency_ns, 0.5)", "quantile_cont(latency_ns, 0.99)", "max(latency_ns)"))


def _groups(rows: list[tuple]) -> dict[tuple[int, str, str], tuple]:
    return {(r[0], r[1], r[2]): r[3:] for r in rows}


def operation_figures(db: duckdb.DuckDBPyConnection, spans_sql: str) -> list[OperationFigures]:
    """Each step's operations, per component and name, in step order; `spans_sql` gives
    each step's (step, phase, lo, hi) (phases.SPANS_SQL)."""
    within = f"""WITH s AS ({spans_sql}),
        o AS (SELECT s.step, s.phase, s.hi - s.lo AS phase_ns, o.host || '/' || o.component AS who, o.*
              FROM operations o JOIN s ON o.intended_ts BETWEEN s.lo AND s.hi)"""
    main = db.execute(f"""{within}
        SELECT step, who, name, any_value(phase), any_value(phase_ns), count(*),
               {_latencies("outcome = 'ok'")}, {_latencies("outcome <> 'ok'")},
               quantile_cont(lag_ns, 0.99), max(lag_ns), count(*) FILTER (lag_ns > {LATE_NS})
        FROM o GROUP BY step, who, name ORDER BY step, who, name""").fetchall()
    causes: dict[tuple[int, str, str], list[tuple[str, str, int]]] = {}
    for step, who, name, outcome, cause, n in db.execute(f"""{within}
            SELECT step, who, name, outcome, coalesce(cause, ''), count(*) AS n FROM o WHERE outcome <> 'ok'
            GROUP BY ALL ORDER BY n DESC, outcome, 5""").fetchall():
        causes.setdefault((step, who, name), []).append((outcome, cause, n))
    # The longest time without a success: between consecutive successes' ends, from the
    # first operation's instant and to the last one's end.
    gaps = _groups(db.execute(f"""{within},
        marks AS (SELECT step, who, name, end_ts AS t FROM o WHERE outcome = 'ok'
                  UNION ALL SELECT step, who, name, min(intended_ts) FROM o GROUP BY ALL
                  UNION ALL SELECT step, who, name, max(end_ts) FROM o GROUP BY ALL)
        SELECT step, who, name, max(t - prev), arg_max(prev, t - prev) FROM (
            SELECT *, lag(t) OVER (PARTITION BY step, who, name ORDER BY t) AS prev FROM marks)
        WHERE prev IS NOT NULL GROUP BY ALL""").fetchall())
    streaks = _groups(db.execute(f"""{within}
        SELECT step, who, name, max(n) FROM (
            SELECT step, who, name, island, count(*) AS n FROM (
                SELECT *, count(*) FILTER (outcome = 'ok') OVER (
                    PARTITION BY step, who, name ORDER BY intended_ts ROWS UNBOUNDED PRECEDING) AS island
                FROM o)
            WHERE outcome <> 'ok' GROUP BY ALL)
        GROUP BY ALL""").fetchall())
    figures = []
    for step, who, name, phase, phase_ns, n, *latencies, lag99, lagmax, late in main:
        key = (step, who, name)
        ok, failed = Latencies(*latencies[:4]), Latencies(*latencies[4:])
        gap, gap_from = gaps.get(key, (0, 0))
        figures.append(OperationFigures(
            step, phase, who, name, n, ok.count, phase_ns, ok if ok.count else None,
            failed if failed.count else None, tuple(causes.get(key, [])), gap or 0, gap_from or 0,
            streaks.get(key, (0,))[0], lag99, lagmax, late))
    return figures


def outside_steps(db: duckdb.DuckDBPyConnection, spans_sql: str) -> int:
    """How many operations' instants fall in no step (between steps, or in none that ran)."""
    return db.execute(f"""WITH s AS ({spans_sql}) SELECT count(*) FROM operations o
        WHERE NOT EXISTS (FROM s WHERE o.intended_ts BETWEEN s.lo AND s.hi)""").fetchall()[0][0]
