"""Pairs: intervals from a `start` record to an `end` record with the same tag, across hosts
on the global timeline (the experiment file's analysis: pairs, and the graph's pair filter).
The first record of each tag on each side counts; each end carries its error bound."""

from __future__ import annotations

from typing import Any

_PAIR_SQL = """
WITH s AS (SELECT tag, host, ts, ts_local, bound_ns FROM {source} WHERE entity = $start AND tag IS NOT NULL
           AND ($start_component IS NULL OR component = $start_component)
           QUALIFY row_number() OVER (PARTITION BY tag ORDER BY ts) = 1),
     e AS (SELECT tag, host, ts, ts_local, bound_ns FROM {source} WHERE entity = $end AND tag IS NOT NULL
           AND ($end_component IS NULL OR component = $end_component)
           QUALIFY row_number() OVER (PARTITION BY tag ORDER BY ts) = 1)
SELECT $name AS name, s.host AS start_host, e.host AS end_host, tag, s.ts AS start_ts, e.ts AS end_ts,
       -- On one host the local clock is exact; across hosts both ends carry their bounds.
       CASE WHEN s.host = e.host THEN e.ts_local - s.ts_local ELSE e.ts - s.ts END AS duration_ns,
       CASE WHEN s.host = e.host THEN 0 ELSE s.bound_ns + e.bound_ns END AS bound_ns, 'pair' AS source,
       e.ts - s.ts AS global_ns, s.bound_ns + e.bound_ns AS global_bound_ns
FROM s JOIN e USING (tag)
"""


def pair_sql(source: str) -> str:
    """The pairing query over the table or view `source` (a merged table's or a graph node's
    name, which the experiment file's schema holds to a plain identifier), with the pair's
    parameters left as $name, $start, $end, $start_component and $end_component for
    `pair_params`."""
    return _PAIR_SQL.format(source=source)


def pair_params(name: str, start: str, end: str, start_component: str | None = None,
                end_component: str | None = None) -> dict[str, Any]:
    """The query parameters of one pair."""
    return {"name": name, "start": start, "end": end, "start_component": start_component,
            "end_component": end_component}
