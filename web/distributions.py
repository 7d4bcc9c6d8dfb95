"""A run page's distributions: each interval's and pair's histogram and ECDF per host (per
group past HOSTS_PER_DISTRIBUTION hosts), aggregated by DuckDB on the server, with p50, p99,
the min and the max said, and what the histogram's end bars hold past its range."""

from __future__ import annotations

from typing import Any

import duckdb
from netspec.analysis.phases import missing, views
from netspec.analysis.units import duration_text, time_unit

from . import fleet

HIST_BINS = 60
# A latency plot's top margin: its p50 and p99 labels sit in it, below plotly.js's toolbar.
LABELS_TOP_PX = 48
ECDF_POINTS = 101
HOSTS_PER_DISTRIBUTION = 8


def distributions(db: duckdb.DuckDBPyConnection,
                  of: dict[str, str] | None = None) -> list[dict[str, Any]] | dict[str, str]:
    """Each interval and pair: a histogram and an ECDF per host where it started (per group
    past HOSTS_PER_DISTRIBUTION hosts, `of` naming each host's group, with the hosts of the
    slowest p99 drawn apart), in the unit that suits it, with p50 and p99 marked and said."""
    if "intervals" not in views(db):
        return missing("intervals")
    out = []
    quantiles = [i / (ECDF_POINTS - 1) for i in range(ECDF_POINTS)]
    for name, n, p50, p99, lo, hi, least, most in db.execute("""
            SELECT name, count(*), quantile_cont(duration_ns, 0.5), quantile_cont(duration_ns, 0.99),
                   quantile_cont(duration_ns, 0.001), quantile_cont(duration_ns, 0.999),
                   min(duration_ns), max(duration_ns)
            FROM intervals GROUP BY name ORDER BY name""").fetchall():
        unit, scale = time_unit([p50])
        by_p99 = db.execute("""SELECT start_host, quantile_cont(duration_ns, 0.99) AS p FROM intervals
                               WHERE name = $name GROUP BY start_host ORDER BY p DESC, start_host""",
                            {"name": name}).fetchall()
        label_of = fleet.labels([h for h, _ in by_p99], of or {}, HOSTS_PER_DISTRIBUTION)
        shown = list(dict.fromkeys(label_of.values()))
        width = max((hi - lo) / HIST_BINS, 1.0)
        params = {"lo": lo, "width": width, "bins": HIST_BINS, "name": name, "hosts": list(label_of),
                  "labels": list(label_of.values())}
        labelled = """intervals JOIN (SELECT unnest($hosts) AS host, unnest($labels) AS label) m
                      ON start_host = m.host WHERE name = $name"""
        hist = db.execute(f"""
            SELECT label, least(greatest(floor((duration_ns - $lo) / $width), 0), $bins - 1) AS bin,
                   count(*) FROM {labelled} GROUP BY ALL ORDER BY bin""", params).fetchall()
        ecdf = dict(db.execute(f"SELECT label, quantile_cont(duration_ns, $q) FROM {labelled} GROUP BY label",
                               {"q": quantiles, "name": name, "hosts": params["hosts"],
                                "labels": params["labels"]}).fetchall())
        counts: dict[str, list[int]] = {label: [0] * HIST_BINS for label in shown}
        for label, bin_, count in hist:
            counts[label][int(bin_)] += count
        centres = [(lo + (i + 0.5) * width) / scale for i in range(HIST_BINS)]
        marks = [{"type": "line", "xref": "x", "yref": "paper", "x0": v / scale, "x1": v / scale, "y0": 0,
                  "y1": 1, "line": {"dash": "dot", "color": "#444", "width": 1}} for v in (p50, p99)]
        # p50's label left of its line and p99's right of its own: near ones never run into each other
        labels = [{"x": v / scale, "y": 1, "xref": "x", "yref": "paper", "yanchor": "bottom", "xanchor": side,
                   "text": label, "showarrow": False, "font": {"size": 10}}
                  for v, label, side in ((p50, "p50", "right"), (p99, "p99", "left"))]
        axis = {"title": {"text": f"{name} ({unit})"}, "exponentformat": "none"}
        folded = _tail_text(n, lo, hi, least, most, width, db, name)
        tail = ([{"x": 1, "y": 1, "xref": "paper", "yref": "paper", "xanchor": "right", "yanchor": "top",
                  "text": folded, "showarrow": False, "align": "right", "bgcolor": "rgba(255,248,225,0.9)",
                  "font": {"size": 10, "color": "#8a5a00"}}] if folded else [])
        out.append({
            "name": name, "count": n, "unit": unit, "p50": p50 / scale, "p99": p99 / scale,
            "p50_text": duration_text(p50), "p99_text": duration_text(p99),
            "min_text": duration_text(least), "max_text": duration_text(most),
            "tail": folded.replace("<br>", "; "),
            "hosts": len(by_p99), "hosts_shown": shown,
            "histogram": {"data": [{"type": "bar", "name": label, "x": centres, "y": counts[label]}
                                   for label in shown],
                          "layout": {"barmode": "stack", "height": 280,
                                     "margin": {"t": LABELS_TOP_PX, "r": 10}, "shapes": marks,
                                     "annotations": labels + tail, "xaxis": axis,
                                     "yaxis": {"title": {"text": "count"}}}},
            "ecdf": {"data": [{"type": "scatter", "mode": "lines", "name": label, "line": {"shape": "hv"},
                               "x": [v / scale for v in ecdf[label]], "y": quantiles} for label in shown],
                     "layout": {"height": 280, "margin": {"t": LABELS_TOP_PX, "r": 10}, "shapes": marks,
                                "annotations": labels, "xaxis": axis,
                                "yaxis": {"title": {"text": "fraction at or below"}, "range": [0, 1.02]}}}})
    return out


def _tail_text(n: int, lo: float, hi: float, least: float, most: float, width: float,
               db: duckdb.DuckDBPyConnection, name: str) -> str:
    """What a histogram's end bars hold beyond its range (p0.1 to p99.9, HIST_BINS bars): the
    values below and above it, folded into them, with the true min and max; "" when none is."""
    below, above = db.execute("""SELECT count(*) FILTER (duration_ns < $lo),
                                        count(*) FILTER (duration_ns > $top)
                                 FROM intervals WHERE name = $name""",
                              {"lo": lo, "top": lo + HIST_BINS * width, "name": name}).fetchone()
    said = []
    if below:
        said.append(f"first bar: also {below} of {n} below p0.1, to the min {duration_text(least)}")
    if above:
        said.append(f"last bar: also {above} of {n} above p99.9, to the max {duration_text(most)}")
    return "<br>".join(said)
