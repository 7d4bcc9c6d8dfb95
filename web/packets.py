"""The packets panel (packets.parquet, analysis/packets.py; `services: packets:`): each
direction's packets' kernel-to-kernel delay over the run, beside the steps and the faults as
the operations panel draws them, a row per direction and step with what was sent, matched and
lost and the one-way delay, and a row per pair and step splitting its interval into the
sender's, the network's and the receiver's time (analysis/packetsplit.py)."""

from __future__ import annotations

from typing import Any

import duckdb
from netspec.analysis.packets import LinkCounts
from netspec.analysis.packetsplit import splits
from netspec.analysis.phases import views
from netspec.analysis.units import duration_text

from .eventtable import fair_share
from .faults import outage_shapes
from .panels import step_shapes

POINTS = 20000  # points drawn at most, shared fairly among the directions (the table counts them all)
REPORT_POINTS = 5000


def _count_row(c: LinkCounts) -> dict[str, Any]:
    return {"link": f"{c.src} -> {c.dst}", "phase": c.phase or "outside the steps", "sent": c.sent,
            "matched": c.matched, "lost": c.lost, "outside": c.outside, "unmatched": c.unmatched,
            "one_way": "-" if c.one_way_p50_ns is None else
            f"p50 {duration_text(c.one_way_p50_ns)}, p99 {duration_text(c.one_way_p99_ns)} "
            f"± {duration_text(c.bound_p50_ns)}"}


def packets(db: duckdb.DuckDBPyConnection, origin: int, counts: list[LinkCounts],
            points: int | None = None) -> dict[str, Any]:
    """The panel's figure and tables; `counts` are the summary's (summary.json's `packets`)."""
    if "packets" not in views(db):
        return {"figure": None, "rows": [], "splits": [], "sampled": ""}
    groups = db.execute("SELECT src_host, dst_host, count(*) FROM packets WHERE matched GROUP BY ALL "
                        "ORDER BY ALL").fetchall()
    share = max(1, fair_share([n for *_, n in groups], POINTS if points is None else points))
    traces, sampled = [], []
    for src, dst, n in groups:
        every = -(-n // share)
        if every > 1:
            sampled.append(f"{src} -> {dst}: 1 in {every}")
        rows = db.execute("""SELECT round((sent_ts - $origin) / 1e6, 3), one_way_ns / 1e6, flow FROM (
                                 SELECT *, row_number() OVER (ORDER BY sent_ts) AS k FROM packets
                                 WHERE matched AND src_host = $src AND dst_host = $dst)
                             WHERE k % $every = 0 ORDER BY sent_ts""",
                          {"origin": origin, "src": src, "dst": dst, "every": every}).fetchall()
        traces.append({"type": "scattergl", "mode": "markers", "name": f"{src} -> {dst} ({n})",
                       "x": [r[0] for r in rows], "y": [float(f"{r[1]:.4g}") for r in rows],
                       "hovertext": [r[2] for r in rows], "marker": {"size": 3, "opacity": 0.6}})
    figure = {"data": traces, "layout": {
        "height": 320, "margin": {"t": 20, "r": 20},
        "shapes": step_shapes(db, origin) + (outage_shapes(db, origin) if "faults" in views(db) else []),
        "xaxis": {"title": {"text": "sent (ms from the run's start)"}},
        "yaxis": {"title": {"text": "one way, kernel to kernel (ms)"}, "type": "log"}}}
    split_rows = [{"pair": s.pair, "link": f"{s.src} -> {s.dst}", "phase": s.phase or "outside the steps",
                   "carried": f"{s.carried} of {s.instances}", "user": duration_text(s.user_ns),
                   "sender": duration_text(s.sender_ns), "network": duration_text(s.network_ns),
                   "receiver": duration_text(s.receiver_ns)} for s in splits(db)]
    return {"figure": figure if traces else None, "rows": [_count_row(c) for c in counts],
            "splits": split_rows, "sampled": "; ".join(sampled)}
