"""A run page's events table: a page of the events in global time order with every filter a
bound parameter, the fair sample a report carries, and a record's value in words (an
interval's as its duration)."""

from __future__ import annotations

from typing import Any

import duckdb
from netspec.analysis.phases import missing, views
from netspec.analysis.units import duration_text

EVENTS_PAGE_MAX = 500


def events(db: duckdb.DuckDBPyConnection, origin: int, *, text: str = "", host: str = "", component: str = "",
           entity: str = "", tag: int | None = None, since_ms: float | None = None,
           until_ms: float | None = None, offset: int = 0, limit: int = 100,
           cap: int = EVENTS_PAGE_MAX) -> dict[str, Any]:
    """One page of events (at most `cap`) in global time order, filtered; every filter is a
    bound parameter."""
    if "events" not in views(db):
        return {"total": 0, "rows": [], "offset": 0, **missing("events")}
    # DuckDB refuses a parameter its statement does not use: each is added with its condition.
    where: list[str] = ["kind != 'admin'"]
    params: dict[str, Any] = {}
    for column, value in (("host", host), ("component", component)):
        if value:
            where.append(f"{column} = ${column}")
            params[column] = value
    # The same match as a report's page makes of the events it carries (netspec.js's
    # filterEmbedded): an entity whole (case aside, `*` any run), text within the entity or
    # the data, or the value itself.
    if entity:
        where.append("entity ILIKE $entity ESCAPE '\\'")
        params["entity"] = _like(entity).replace("*", "%")
    if text:
        where.append("(entity ILIKE $text ESCAPE '\\' OR data ILIKE $text ESCAPE '\\'"
                     + (" OR value = $number)" if _number(text) is not None else ")"))
        params["text"] = f"%{_like(text)}%"
        if _number(text) is not None:
            params["number"] = _number(text)
    if tag is not None:
        where.append("tag = $tag")
        params["tag"] = tag
    if since_ms is not None:
        where.append("ts >= $since")
        params["since"] = origin + int(since_ms * 1e6)
    if until_ms is not None:
        where.append("ts <= $until")
        params["until"] = origin + int(until_ms * 1e6)
    condition = " AND ".join(where)
    total = db.execute(f"SELECT count(*) FROM events WHERE {condition}", params).fetchone()[0]
    limit = max(1, min(limit, cap))
    offset = max(0, min(offset, max(total - 1, 0)))
    rows = db.execute(f"""SELECT (ts - $origin) / 1e6, bound_ns, host, component, entity, kind, tag,
                                 value, data FROM events WHERE {condition}
                          ORDER BY ts LIMIT {limit} OFFSET {offset}""",
                      {**params, "origin": origin}).fetchall()
    return {"total": total, "offset": offset, "limit": limit,
            "rows": [_event_row(r) for r in rows]}


def _like(text: str) -> str:
    """`text` to match as it is in a LIKE pattern (its %, _ and \\ not wildcards)."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and text.strip() else None


def events_sample(db: duckdb.DuckDBPyConnection, origin: int, limit: int) -> dict[str, Any]:
    """At most `limit` events for a page that carries its events (a report): every host and
    kind of record (host, stream, kind) given an equal share, the earliest of each, a share a
    group does not fill left to the others; in global time order, with what was carried
    said (`sample`), and the total."""
    if "events" not in views(db):
        return {"total": 0, "rows": [], "offset": 0, "sample": "no events", **missing("events")}
    groups = db.execute("""SELECT host, stream, kind, count(*) FROM events WHERE kind != 'admin'
                           GROUP BY ALL""").fetchall()
    total = sum(n for *_, n in groups)
    share = fair_share([n for *_, n in groups], limit)
    rows = db.execute("""
        SELECT (ts - $origin) / 1e6, bound_ns, host, component, entity, kind, tag, value, data FROM (
            SELECT *, row_number() OVER (PARTITION BY host, stream, kind ORDER BY ts) AS k
            FROM events WHERE kind != 'admin') WHERE k <= $share ORDER BY ts""",
                      {"origin": origin, "share": share}).fetchall()
    whole = total <= limit
    sample = ("all of them" if whole else
              f"the first {share} of each of its {len(groups)} kinds of record per host "
              f"(host, stream and kind; every one of a group with fewer)")
    return {"total": total, "offset": 0, "limit": len(rows), "sample": sample,
            "rows": [_event_row(r) for r in rows]}


def fair_share(counts: list[int], limit: int) -> int:
    """The largest share q such that taking min(n, q) of each group stays within `limit`."""
    lo, hi = 0, max(counts, default=0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if sum(min(n, mid) for n in counts) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


def value_text(kind: str, value: float | None, data: str | None) -> str | None:
    """What a record said, in words: its data; else an interval's value as the duration it is
    (in the unit that suits it); else an event's value as the program logged it (nodelib
    declares no unit for it)."""
    if data is not None:
        return data
    if value is None:
        return None
    if kind == "interval":
        return duration_text(value)
    return f"{value:,.0f}" if value == int(value) and abs(value) >= 1e4 else f"{value:.6g}"


def _event_row(row: tuple) -> dict[str, Any]:
    ms, bound, h, c, e, k, t, v, d = row
    return {"ms": round(ms, 6), "bound_us": None if bound is None else bound / 1e3, "host": h, "component": c,
            "entity": e, "kind": k, "tag": t, "value": v, "data": d,
            "value_text": None if v is None else value_text(k, v, None)}
