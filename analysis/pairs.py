"""Pairs: intervals from a `start` record to an `end` record with the same tag, across hosts
on the global timeline (the experiment file's analysis: pairs, and the graph's pair filter).

The first start of each tag counts. Its ends are matched by the pair's `match`: `all` (the
default) keeps every end of the tag, a row each, so an entity several components log with one
tag (replication to two backups, multicast) gives each its own latency, host and component;
`first` keeps the earliest end of each tag, `last` the latest. Each end carries its error
bound. What was left unmatched is counted (`PairCounts`), never dropped unsaid."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    # The file check imports this module (through graph.py): DuckDB loads with the merge.
    import duckdb

MATCHES = ("all", "first", "last")  # which ends of a tag a pair keeps; the first is the default

_SIDES = """
s_all AS (SELECT tag, host, component, ts, ts_local, bound_ns FROM {source}
          WHERE entity = $start
            AND ($start_component IS NULL OR list_contains($start_components, component))),
e_all AS (SELECT tag, host, component, ts, ts_local, bound_ns FROM {source}
          WHERE entity = $end AND ($end_component IS NULL OR list_contains($end_components, component))),
s AS (FROM s_all WHERE tag IS NOT NULL QUALIFY row_number() OVER (PARTITION BY tag ORDER BY ts) = 1),
e AS (SELECT *, row_number() OVER (PARTITION BY tag ORDER BY ts) AS first_n,
             row_number() OVER (PARTITION BY tag ORDER BY ts DESC) AS last_n
      FROM e_all WHERE tag IS NOT NULL)"""

_PAIR_SQL = "WITH " + _SIDES + """
SELECT $name AS name, s.host AS start_host, e.host AS end_host, tag, s.ts AS start_ts, e.ts AS end_ts,
       -- On one host the local clock is exact; across hosts both ends carry their bounds.
       CASE WHEN s.host = e.host THEN e.ts_local - s.ts_local ELSE e.ts - s.ts END AS duration_ns,
       CASE WHEN s.host = e.host THEN 0 ELSE s.bound_ns + e.bound_ns END AS bound_ns, 'pair' AS source,
       e.ts - s.ts AS global_ns, s.bound_ns + e.bound_ns AS global_bound_ns,
       s.component AS start_component, e.component AS end_component
FROM s JOIN e USING (tag)
WHERE $match = 'all' OR ($match = 'first' AND e.first_n = 1) OR ($match = 'last' AND e.last_n = 1)
"""

_COUNT_SQL = "WITH " + _SIDES + """,
st AS (SELECT DISTINCT tag FROM s), et AS (SELECT DISTINCT tag FROM e)
SELECT (SELECT count(*) FROM s_all WHERE tag IS NOT NULL), (SELECT count(*) FROM st),
       (SELECT count(*) FROM st ANTI JOIN et USING (tag)),
       (SELECT count(*) FROM e), (SELECT count(*) FROM e ANTI JOIN st USING (tag)),
       (SELECT count(*) FROM et SEMI JOIN st USING (tag)),
       (SELECT count(*) FROM s_all WHERE tag IS NULL) + (SELECT count(*) FROM e_all WHERE tag IS NULL),
       (SELECT count(*) FROM (SELECT tag FROM e SEMI JOIN st USING (tag) GROUP BY tag HAVING count(*) > 1)),
       (SELECT count(DISTINCT tag) FROM (SELECT tag FROM e SEMI JOIN st USING (tag)
                                         GROUP BY tag, host, component HAVING count(*) > 1))
"""


def pair_sql(source: str) -> str:
    """The pairing query over the table or view `source` (a merged table's or a graph node's
    name, which the experiment file's schema holds to a plain identifier), with the pair's
    parameters left as $name, $start, $end, $start_component, $end_component (and the
    components each stands for, $start_components, $end_components) and $match for
    `pair_params`."""
    return _PAIR_SQL.format(source=source)


def pair_params(name: str, start: str, end: str, start_component: str | None = None,
                end_component: str | None = None, match: str | None = None,
                groups: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The query parameters of one pair (`match` None: `all`); a component filter that
    names a group component of `groups` (the plan's) counts each of its components.

    Raises:
        ValueError: `match` is none of MATCHES.
    """
    match = match or MATCHES[0]
    if match not in MATCHES:
        raise ValueError(f"pair {name}: match {match!r} is none of {', '.join(MATCHES)}")
    groups = groups or {}
    return {"name": name, "start": start, "end": end, "start_component": start_component,
            "end_component": end_component, "match": match,
            "start_components": list(groups.get(start_component or "", [start_component])),
            "end_components": list(groups.get(end_component or "", [end_component]))}


class PairCounts(msgspec.Struct, frozen=True):
    """What one pair made of its records: how many it matched and what it left unmatched
    (summary.json's `pairs` holds one per pair, `rows` and `ends_left_out` with it)."""

    pair: str
    match: str
    starts: int  # tagged start records
    start_tags: int  # distinct tags among them: only the first start of each counts
    starts_without_end: int  # start tags no end carries
    ends: int  # tagged end records
    ends_without_start: int  # end records whose tag no start carries
    matched_tags: int  # tags with a start and at least one end
    untagged: int  # start and end records with no tag at all: nothing to pair them by
    # matched tags with more than one end, counted before `match` keeps any (match: all makes a
    # row of each): not the causality line's starts with several ends, which counts rows kept
    tags_with_several_ends: int
    repeated_ends: int  # of them, those one component logged the end of more than once
    start_component: str | None = None  # only this component's starts count (None: any)
    end_component: str | None = None  # only this component's ends count
    # Worked out from the counts above whenever one is made or read (__post_init__).
    rows: int = 0  # the pair's rows in intervals.parquet
    ends_left_out: int = 0  # ends of a matched tag that `match: first` or `last` did not keep

    def __post_init__(self) -> None:
        rows = self.ends - self.ends_without_start if self.match == "all" else self.matched_tags
        msgspec.structs.force_setattr(self, "rows", rows)
        msgspec.structs.force_setattr(self, "ends_left_out", self.ends - self.ends_without_start - rows)

    def only(self) -> str:
        """The pair's component filters in words ("" without): what a count of 0 may owe to."""
        said = [f"{side}_component: {c}" for side, c in (("start", self.start_component),
                                                         ("end", self.end_component)) if c]
        return f" (counting only {' and '.join(said)})" if said else ""

    def warnings(self) -> list[str]:
        """What the pair left unmatched or out, one line (none if it left nothing)."""
        said = []
        if self.starts_without_end:
            said.append(f"{self.starts_without_end} of {self.start_tags} starts had no end")
        if self.ends_without_start:
            said.append(f"{self.ends_without_start} of {self.ends} ends had no start")
        if self.starts > self.start_tags:
            said.append(f"{self.starts - self.start_tags} starts repeat a tag (the first of each counts)")
        if self.ends_left_out:
            said.append(f"{self.ends_left_out} ends of a matched tag left out by match: {self.match}")
        elif self.repeated_ends:  # match: all, a row each: one start counted more than once
            # Several components ending a tag is the point of `all` (replication); one component
            # ending it twice is a count of its own (a message read in parts?): said.
            said.append(f"{self.repeated_ends} of {self.matched_tags} matched starts have several ends from "
                        f"one component, a row each ({self.rows} rows; `match: first` or `last` keeps one "
                        "end a start)")
        if self.untagged:
            said.append(f"{self.untagged} records carry no tag")
        return [f"pair {self.pair}{self.only()}: " + "; ".join(said)] if said else []


def pair_counts(db: duckdb.DuckDBPyConnection, source: str, params: dict[str, Any]) -> PairCounts:
    """The counts of the pair `params` (from `pair_params`) over the table or view `source`."""
    row = db.execute(_COUNT_SQL.format(source=source),
                     {k: v for k, v in params.items() if k not in ("name", "match")}).fetchall()[0]
    return PairCounts(params["name"], params["match"], *row, start_component=params["start_component"],
                      end_component=params["end_component"])
