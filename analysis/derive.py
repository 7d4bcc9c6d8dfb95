"""Data derived from the merged tables, in DuckDB over the Parquet files:

    rates.parquet     CAMP counters as rates between consecutive samples, and each host's
                      CPU busy %
    usage.parquet     per step and host, every CAMP counter's change between the step's global
                      boundaries (interpolated between the samples either side)
    workload.parquet  per component, real against user and system time over its sampled
                      window, and what that makes it: CPU-bound, kernel-bound or waiting
                      (after Spinellis)
    states.parquet    every counter's and histogram's last state, and how often it changed
                      (each state over time is a row of events.parquet)

and what CAMP said of its own samples (`CAMP/warning`: a process gone, a part unreadable,
CPU time /proc/stat missed, slots skipped), for the merge's warnings.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

# CAMP/node fields that are levels, not running totals: they have no rate.
GAUGES = r"^(mem_free|proc\..+\.(pid|running|threads|vm_size|working_set))$"
# Real time a lot larger than CPU time (Spinellis's r >> u + s, taken as below half): the
# component spent most of its window waiting. Spinellis calls that I/O-bound, but CAMP counts
# no process's I/O, and a loop busy 40 % of the time and asleep the rest waits on a timer:
# what it waited for is not said.
WAITING_BELOW = 0.5

COUNTERS_SQL = f"""
CREATE TEMP TABLE counters AS
SELECT ts, bound_ns, host, field, value FROM samples
WHERE entity = 'CAMP/node' AND value IS NOT NULL AND NOT regexp_matches(field, '{GAUGES}')
"""

# A counter that goes down was reset (its process restarted): that step has no rate.
RATES_SQL = """
WITH steps AS (
  SELECT ts, bound_ns, host, field, value - lag(value) OVER w AS delta, ts - lag(ts) OVER w AS dt
  FROM counters WINDOW w AS (PARTITION BY host, field ORDER BY ts)),
busy AS (
  SELECT ts, any_value(bound_ns) AS bound_ns, host, 'cpu.busy_pct' AS field,
         100 * sum(delta) FILTER (field NOT IN ('cpu.idle', 'cpu.iowait')) / sum(delta) AS rate, '%' AS unit
  FROM steps WHERE field LIKE 'cpu.%' AND delta >= 0 GROUP BY ts, host HAVING sum(delta) > 0)
SELECT ts, bound_ns, host, field, delta * 1e9 / dt / (CASE WHEN field LIKE '%_ns' OR field LIKE 'cpu.%'
       THEN 1e9 ELSE 1 END) AS rate,
       CASE WHEN field LIKE '%_ns' OR field LIKE 'cpu.%' THEN 'cpus' ELSE '/s' END AS unit
FROM steps WHERE delta >= 0 AND dt > 0
UNION ALL SELECT * FROM busy
ORDER BY ts, host, field
"""

# A counter's value at an instant, linearly between the samples either side; null where the
# instant is outside the samples (CAMP samples only between start_logging and stop_logging).
USAGE_SQL = """
WITH bounds AS (SELECT step, any_value(phase) AS phase, min(entered) AS t0, max(acked) AS t1
                FROM phases GROUP BY step),
keys AS (SELECT DISTINCT host, field FROM counters),
ends AS (SELECT step, phase, host, field, t0 AS t, 0 AS side FROM bounds, keys
         UNION ALL SELECT step, phase, host, field, t1, 1 FROM bounds, keys),
before AS (SELECT e.*, c.ts AS ts0, c.value AS v0 FROM ends e
           ASOF LEFT JOIN counters c ON e.host = c.host AND e.field = c.field AND c.ts <= e.t),
around AS (SELECT b.*, c.ts AS ts1, c.value AS v1 FROM before b
           ASOF LEFT JOIN counters c
           ON b.host = c.host AND b.field = c.field AND c.ts >= b.t),
valued AS (SELECT step, phase, host, field, side, t,
              CASE WHEN ts0 IS NULL OR ts1 IS NULL THEN NULL WHEN ts1 = ts0 THEN v0
                   ELSE v0 + (v1 - v0) * (t - ts0) / (ts1 - ts0) END AS value FROM around)
SELECT s.step, s.phase, s.host, s.field, s.t AS start_ts, e.t AS end_ts, e.value - s.value AS delta,
       (e.value - s.value) * 1e9 / nullif(e.t - s.t, 0) AS per_s
FROM valued s JOIN valued e USING (step, host, field)
WHERE s.side = 0 AND e.side = 1
ORDER BY step, host, field
"""

STATES_SQL = """
SELECT host, component, entity, kind, count(*) AS updates, max(ts) AS last_ts, arg_max(value, ts) AS value,
       arg_max(data, ts) AS data
FROM events WHERE kind IN ('counter', 'histogram') GROUP BY ALL ORDER BY host, component, entity
"""

WORKLOAD_SQL = """
WITH p AS (SELECT ts, host, regexp_extract(field, '^proc\\.(.+)\\.(user_ns|kernel_ns|waited_ns)$', 1)
                  AS component,
                  regexp_extract(field, '^proc\\.(.+)\\.(user_ns|kernel_ns|waited_ns)$', 2) AS part, value
           FROM counters WHERE regexp_matches(field, '^proc\\..+\\.(user_ns|kernel_ns|waited_ns)$'))
SELECT host, component, max(ts) FILTER (part = 'user_ns') - min(ts) FILTER (part = 'user_ns') AS real_ns,
       arg_max(value, ts) FILTER (part = 'user_ns') - arg_min(value, ts) FILTER (part = 'user_ns') AS user_ns,
       arg_max(value, ts) FILTER (part = 'kernel_ns') - arg_min(value, ts) FILTER (part = 'kernel_ns')
         AS system_ns,
       arg_max(value, ts) FILTER (part = 'waited_ns') - arg_min(value, ts) FILTER (part = 'waited_ns')
         AS waited_ns
FROM p GROUP BY host, component HAVING count(*) FILTER (part = 'user_ns') > 1 ORDER BY host, component
"""


WORKLOAD = pa.schema([("host", pa.string()), ("component", pa.string()), ("real_ns", pa.int64()),
                      ("user_ns", pa.int64()), ("system_ns", pa.int64()), ("waited_ns", pa.int64()),
                      ("kind", pa.string())])


class Workload(msgspec.Struct, frozen=True):
    """One component's timing profile over the window CAMP sampled it in, as workload.parquet
    and summary.json's `workload` hold it."""

    host: str
    component: str
    real_ns: int
    user_ns: int
    system_ns: int
    waited_ns: int | None = None  # on a run queue, runnable but given no CPU (None: not sampled)
    # After Spinellis's table 4.1: r >> u + s is waiting (blocked on I/O, asleep on a timer,
    # waiting for a peer: CAMP does not tell which, so not "I/O-bound"), s > u kernel-bound,
    # else CPU-bound; worked out from the times whenever one is made or read (__post_init__).
    kind: str = ""

    def __post_init__(self) -> None:
        if self.real_ns <= 0:
            kind = "unknown"
        elif (self.user_ns + self.system_ns) < WAITING_BELOW * self.real_ns:
            kind = "waiting"
        else:
            kind = "kernel-bound" if self.system_ns > self.user_ns else "CPU-bound"
        msgspec.structs.force_setattr(self, "kind", kind)

    def text(self) -> str:
        cpu = (self.user_ns + self.system_ns) / self.real_ns if self.real_ns > 0 else 0.0
        queued = (self.waited_ns or 0) / self.real_ns if self.real_ns > 0 else 0.0
        on_queue = f"{100 * queued:.0f} % on a run queue for a CPU, the rest " if queued >= 0.005 else ""
        waited = (f"; waiting {100 * (1 - cpu):.0f} % of the time: {on_queue}on I/O, a timer or a peer, "
                  "which CAMP does not tell" if self.kind == "waiting" else "")
        return (f"{self.host}/{self.component}: {self.kind} (real {self.real_ns / 1e9:.2f} s, user "
                f"{self.user_ns / 1e9:.2f} s, system {self.system_ns / 1e9:.2f} s: "
                f"CPU {100 * cpu:.0f} %{waited})")


def write_derived(db: duckdb.DuckDBPyConnection, out: Path) -> list[Workload]:
    """rates, usage, workload and states Parquet files in `out` from the views events,
    samples and phases."""
    db.execute(f"COPY ({STATES_SQL}) TO '{out / 'states.parquet'}' (FORMAT parquet)")
    db.execute(COUNTERS_SQL)
    db.execute(f"COPY ({RATES_SQL}) TO '{out / 'rates.parquet'}' (FORMAT parquet)")
    db.execute(f"COPY ({USAGE_SQL}) TO '{out / 'usage.parquet'}' (FORMAT parquet)")
    rows = db.execute(WORKLOAD_SQL).fetchall()
    workloads = [Workload(h, c, int(r), int(u or 0), int(s or 0), None if w is None else int(w))
                 for h, c, r, u, s, w in rows]
    pq.write_table(pa.Table.from_pylist([msgspec.structs.asdict(w) for w in workloads], schema=WORKLOAD),
                   out / "workload.parquet")
    return workloads


CAMP_WARNINGS_SQL = """
SELECT host, warning, arg_min(message, ts) AS first, count(*) AS said
FROM (SELECT host, ts, json_extract_string(data, '$.kind') AS warning,
             json_extract_string(data, '$.message') AS message
      FROM events WHERE entity = 'CAMP/warning')
GROUP BY host, warning ORDER BY host, min(ts)"""


def camp_warnings(db: duckdb.DuckDBPyConnection) -> list[str]:
    """Each host's CAMP warnings, one line a kind: its first message, and how many more."""
    return [f"host {host}: CAMP: {first}" + (f" (and {said - 1} more like it)" if said > 1 else "")
            for host, _, first, said in db.execute(CAMP_WARNINGS_SQL).fetchall()]


def camp_on_one_kernel(db: duckdb.DuckDBPyConnection, groups: list[list[str]]) -> list[list[str]]:
    """Of the groups of hosts that share one kernel (`provenance.shared_kernels`), those CAMP
    sampled a host of: their node counters are the machine's, the same for each. A host in a
    container whose CAMP read its cgroup (its `cgroup` warning says so: camp/cgroup.py) has
    figures of its own, and is left out."""
    sampled = {h for (h,) in db.execute(
        "SELECT DISTINCT host FROM samples WHERE entity = 'CAMP/node'").fetchall()}
    sampled -= {h for (h,) in db.execute(
        "SELECT DISTINCT host FROM events WHERE entity = 'CAMP/warning' "
        "AND json_extract_string(data, '$.kind') = 'cgroup'").fetchall()}
    return [hosts for hosts in groups if sampled & set(hosts)]


def shared_kernel_text(hosts: list[str]) -> str:
    """What CAMP's figures of hosts on one kernel are."""
    return (f"hosts {', '.join(hosts)} share one kernel (one boot_id: namespaces or containers of one "
            "machine): CAMP's CPU, memory and disk figures of each are the whole machine's, not the "
            "host's own (each component's own CPU, proc.*, is its own)")
