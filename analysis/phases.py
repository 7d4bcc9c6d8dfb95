"""Per-phase figures of a result set, in one query each: for every step of the schedule its
span on the global timeline (the first participant entering to the last ack), how many of its
participants acked ok, the CPU and network its hosts used over it (usage.parquet), the
latency of every interval that ended inside it, the components starved of CPU in it
(starved.py), its operations (operations.py) and its log histograms merged over every host
(histograms.py). The browser's per-phase panel, report.html and
`ns_control report`'s per-phase lines all read them here; `report` judges a metric's trend
within each span, so a change from one phase to the next is not read as a drift.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb

from .histograms import MergedHistogram, merged_histograms
from .machines import Machines, machines, once_per_machine
from .operations import OperationFigures, operation_figures, outside_steps
from .provenance import host_facts
from .resultset import open_tables
from .starved import Starved, starved
from .units import duration_text, rate_text

# The usage rows a host's CPU busy time is the sum of (the browser's heatmaps and compare read them too).
CPU_FIELDS = "field IN ('cpu.user', 'cpu.system', 'cpu.nice', 'cpu.irq', 'cpu.softirq')"
# A step's span: the first participant entering to the last ack, with its count of participants.
SPANS_SQL = """SELECT step, any_value(phase) AS phase, min(entered) AS lo, max(acked) AS hi, count(*) AS n,
                      count(*) FILTER (status IN ('ok', 'warning')) AS ok
               FROM phases WHERE entered IS NOT NULL AND acked IS NOT NULL GROUP BY step"""
NET_FIELDS = "(field LIKE 'net.%.bytes_sent' OR field LIKE 'net.%.bytes_recv')"


@dataclass(frozen=True)
class Latency:
    name: str  # the interval or pair
    count: int
    p50_ns: float
    p99_ns: float
    max_ns: float
    starts: int | None = None  # a pair's: the starts its values end (fewer: several ends a start)


    def of_starts(self) -> str:
        """A pair's values of fewer starts, in words ("" for one end a start)."""
        if self.starts is None or self.starts >= self.count:
            return ""
        return f" (ends of {self.starts} starts: several ends a start)"


@dataclass(frozen=True)
class PhaseFigures:
    step: int
    phase: str
    start_ns: int  # global: the first participant entering
    end_ns: int  # global: the last ack
    participants: int
    ok: int  # acked ok or with a warning
    cpus_mean: float | None  # CPUs busy per host over the step, the hosts' mean (None: not sampled)
    cpus_max: float | None  # at most the host's CPUs (a counter's window can straddle a short step)
    cpus_max_host: str
    net_bytes_per_s: float | None  # bytes sent + received per second over the step, a machine's once
    latencies: tuple[Latency, ...]
    capped: int = 0  # hosts' CPU figures above their CPUs, counted at them
    starved: tuple[Starved, ...] = ()  # the components that waited for CPU for much of it
    operations: tuple[OperationFigures, ...] = ()
    histograms: tuple[MergedHistogram, ...] = ()  # log histograms, merged over every host

    @property
    def took_ns(self) -> int:
        return self.end_ns - self.start_ns


def views(db: duckdb.DuckDBPyConnection) -> set[str]:
    """The result set's tables open in `db` (open_tables makes each a view)."""
    return {r[0] for r in db.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}


def missing(table: str) -> dict[str, str]:
    """What a panel over a result set says of a table a merge always writes that `views` does
    not find (deleted, or a copy cut short): its name and how to make it again, never read as
    a run without its records. RUN stands for the run's id, which the page fills in."""
    return {"missing": f"{table}.parquet is missing from this run's result set (merged/): "
                       "ns_control fetch RUN merges the run again and writes it"}


def spans(db: duckdb.DuckDBPyConnection) -> list[tuple[int, str, int, int, int, int]]:
    """Each step that ran: (step, phase, start, end, participants, ok), in step order."""
    if "phases" not in views(db):
        return []
    return db.execute(f"SELECT * FROM ({SPANS_SQL}) ORDER BY step").fetchall()


def phase_figures(db: duckdb.DuckDBPyConnection, hosts: Machines | None = None) -> list[PhaseFigures]:
    """Every step's figures (see the module's docstring), in step order. `hosts`: which read
    one machine (analysis/machines.py), whose network is counted once and whose CPU figure is
    at most its CPUs; None counts each host as a machine of its own, uncapped."""
    steps = spans(db)
    if not steps:
        return []
    have = views(db)
    hosts = hosts or Machines()
    cpu: dict[int, tuple[float, float, str, int]] = {}
    net: dict[int, float] = {}
    if "usage" in have:
        per_host: dict[int, dict[str, float]] = {}
        for step, host, v in db.execute(f"""SELECT step, host, sum(per_s) / 1e9 FROM usage
                                            WHERE per_s IS NOT NULL AND {CPU_FIELDS}
                                            GROUP BY step, host ORDER BY step, host""").fetchall():
            per_host.setdefault(step, {})[host] = v
        for step, values in per_host.items():
            capped = {h: min(v, hosts.cpus.get(h, v)) for h, v in values.items()}
            top = max(capped, key=lambda h: (capped[h], h))
            cpu[step] = (sum(capped.values()) / len(capped), capped[top], top,
                         sum(capped[h] < v for h, v in values.items()))
        by_step: dict[int, dict[str, float]] = {}
        for step, host, v in db.execute(f"""SELECT step, host, sum(per_s) FROM usage
                                            WHERE per_s IS NOT NULL AND {NET_FIELDS}
                                            GROUP BY step, host""").fetchall():
            by_step.setdefault(step, {})[host] = v
        net = {step: once_per_machine(values, hosts.net_of) for step, values in by_step.items()}
    latency: dict[int, list[Latency]] = {}
    if "intervals" in have:
        for step, name, n, p50, p99, top, starts in db.execute(f"""
                WITH s AS ({SPANS_SQL})
                SELECT s.step, i.name, count(*), quantile_cont(i.duration_ns, 0.5),
                       quantile_cont(i.duration_ns, 0.99), max(i.duration_ns),
                       count(DISTINCT i.tag) FILTER (i.source = 'pair')
                FROM intervals i JOIN s ON i.end_ts BETWEEN s.lo AND s.hi
                GROUP BY ALL ORDER BY s.step, i.name""").fetchall():
            latency.setdefault(step, []).append(Latency(name, n, p50, p99, top, starts or None))
    hungry: dict[int, list[Starved]] = {}
    for s in starved(db) if "usage" in have else []:
        hungry.setdefault(s.step, []).append(s)
    operations: dict[int, list[OperationFigures]] = {}
    for figures in phase_operations(db):
        operations.setdefault(figures.step, []).append(figures)
    histograms: dict[int, list[MergedHistogram]] = {}
    if "events" in have:
        for merged in merged_histograms(db, SPANS_SQL):
            histograms.setdefault(merged.step, []).append(merged)
    out = []
    for step, phase, lo, hi, n, ok in steps:
        mean, top, top_host, capped = cpu.get(step) or (None, None, "", 0)
        out.append(PhaseFigures(step, phase, lo, hi, n, ok, mean, top, top_host, net.get(step),
                                tuple(latency.get(step, [])), capped, tuple(hungry.get(step, [])),
                                tuple(operations.get(step, [])), tuple(histograms.get(step, []))))
    return out


def phase_operations(db: duckdb.DuckDBPyConnection) -> list[OperationFigures]:
    """Every step's operation figures (operations.operation_figures), in step order."""
    return operation_figures(db, SPANS_SQL) if {"operations", "phases"} <= views(db) else []


def unphased_operations(db: duckdb.DuckDBPyConnection) -> int:
    """How many operations fall in no step's span (operations.outside_steps)."""
    have = views(db)
    return outside_steps(db, SPANS_SQL) if {"operations", "phases"} <= have else 0


def phase_lines(figures: list[PhaseFigures]) -> list[str]:
    """`ns_control report`'s per-phase block: a line per step, then its latencies indented."""
    if not figures:
        return []
    lines = ["per phase (step: took, participants ok, CPU per host mean/max, network, latency "
             "of the intervals that ended in it, operations begun in it):"]
    for f in figures:
        cpu = (f"{f.cpus_mean:.2f} / {f.cpus_max:.2f} cpus ({f.cpus_max_host})"
               if f.cpus_mean is not None else "cpu not sampled")
        network = rate_text(f.net_bytes_per_s, "B/s") if f.net_bytes_per_s is not None else "net not sampled"
        lines.append(f"  {f.step} {f.phase}: {duration_text(f.took_ns)}, {f.ok}/{f.participants} ok, "
                     f"{cpu}, {network}")
        lines.extend(f"      {lat.name}: {lat.count} values{lat.of_starts()}, "
                     f"p50 {duration_text(lat.p50_ns)}, p99 {duration_text(lat.p99_ns)}, "
                     f"max {duration_text(lat.max_ns)}"
                     for lat in f.latencies)
        lines.extend(f"      STARVED: {s.text()}" for s in f.starved)
        lines.extend(f"      {line}" for op in f.operations for line in op.lines())
        lines.extend(f"      {h.line()}" for h in f.histograms)
    return lines


def run_phase_lines(merged: Path, run: str, names: list[str] | None = None) -> list[str]:
    """`phase_lines` of the result set in `merged` (of the run whose hosts are `names`, read
    from their facts which share a machine), headed by the run's name."""
    db = open_tables(merged)
    try:
        lines = phase_lines(phase_figures(db, machines(db, host_facts(merged.parent, names or []))))
        if lines and (outside := unphased_operations(db)):
            lines.append(f"  {outside} operation(s) began in no step's span: counted in operations.parquet, "
                         "in no phase's figures")
    finally:
        db.close()
    return [f"{run}: {lines[0]}", *lines[1:]] if lines else [f"{run}: no step in its phases table"]
