"""Components starved of CPU: in each step, how long a component's process waited on a run
queue, runnable but given no CPU (CAMP's `proc.<component>.waited_ns`, the scheduler's
run_delay), against the step's span and the CPU it ran. A step in which a component waited
for a quarter of its span or more (and STARVED_MIN_NS at least) measured the machine's load
as much as the component: its times are not the component's own. The merge says each such
step and component in its warnings and summary.json, `ns_control report` under the step, and
a campaign with `repeat: {refuse_starved: true}` does not count such a run.
"""

from __future__ import annotations

import duckdb
import msgspec

from .units import duration_text

# A step's span in which a component waited this share of it on a run queue, or more, is
# starved; below STARVED_MIN_NS a wait is a few scheduler slices of jitter, not a starving.
STARVED_SHARE = 0.25
STARVED_MIN_NS = 20_000_000

STARVED_SQL = """
SELECT w.step, w.phase, w.host, regexp_extract(w.field, '^proc\\.(.+)\\.waited_ns$', 1) AS component,
       CAST(w.delta AS BIGINT), CAST(coalesce(c.delta, 0) AS BIGINT), w.end_ts - w.start_ts
FROM usage w LEFT JOIN usage c
  ON c.step = w.step AND c.host = w.host AND c.field = regexp_replace(w.field, 'waited_ns$', 'cpu_ns')
WHERE regexp_matches(w.field, '^proc\\..+\\.waited_ns$') AND w.delta IS NOT NULL
  AND w.delta >= $least AND w.delta >= $share * (w.end_ts - w.start_ts)
ORDER BY w.step, w.host, component
"""


class Starved(msgspec.Struct, frozen=True):
    """A component that waited for CPU for much of a step: the step, who, how long it waited
    on a run queue, how long it ran, and the step's span (global ns)."""

    step: int
    phase: str
    host: str
    component: str
    waited_ns: int
    ran_ns: int
    span_ns: int

    def text(self) -> str:
        share = 100 * self.waited_ns / self.span_ns if self.span_ns > 0 else 100.0
        return (f"host {self.host}: component {self.component} was starved of CPU in step {self.step} "
                f"({self.phase}): it waited {duration_text(self.waited_ns)} on a run queue "
                f"({share:.0f} % of the step's {duration_text(self.span_ns)}) and ran "
                f"{duration_text(self.ran_ns)}: its times there are the machine's load as much as its own")


def starved(db: duckdb.DuckDBPyConnection) -> list[Starved]:
    """Every step and component starved of CPU (STARVED_SHARE, STARVED_MIN_NS), in step order,
    from the usage table in `db` (none where CAMP sampled no run-queue wait)."""
    rows = db.execute(STARVED_SQL, {"least": STARVED_MIN_NS, "share": STARVED_SHARE}).fetchall()
    return [Starved(*row) for row in rows]

