"""A run page's panels drawn from its result set: DuckDB aggregates or downsamples the Parquet
tables on the server and a panel gets at most a few thousand numbers, so a run of 20 million
events opens as fast as the demo. Each function takes a connection with a view per table
(`analysis.resultset.open_tables`) and the run's origin (ns, global) and returns Plotly
figures and rows, ready for JSON.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
from netspec.analysis.links import configured_words
from netspec.analysis.machines import Machines, machines
from netspec.analysis.phases import CPU_FIELDS, missing, phase_figures, spans, views
from netspec.analysis.units import duration_text, rate_text, time_unit
from netspec.protocol.errors import some_hosts
from netspec.protocol.hostfacts import HostFacts
from netspec.protocol.outcome import HUNG
from netspec.protocol.runrecord import RunRecord

from . import fleet, timeline
from .eventtable import value_text

# A host's line over time is cut to this many points (averaged within each bucket).
LINE_POINTS = 600
# Above this many hosts a rate over time is drawn as the fleet's median and range, not a line each.
HOST_LINES_MAX = 16


def clocks(db: duckdb.DuckDBPyConnection, origin: int) -> dict[str, Any]:
    """Each host's offset from the reference over time, and the band its exchanges allow."""
    if "clock" not in views(db):
        return {"figure": None, "rows": [], **missing("clock")}
    rows = db.execute("""
        SELECT host, list((ts - $origin) / 1e6 ORDER BY ts), list(offset_ns ORDER BY ts),
               list(lo_ns ORDER BY ts), list(hi_ns ORDER BY ts), max(bound_ns), any_value(source),
               any_value(reference)
        FROM clock GROUP BY host ORDER BY host""", {"origin": origin}).fetchall()
    unit, scale = time_unit([v for r in rows for v in (r[5],)])
    # past a fleet's fold, the hosts of the widest bounds are drawn (the table lists every host)
    widest = (sorted(rows, key=lambda r: -(r[5] or 0))[:HOST_LINES_MAX] if len(rows) > fleet.FOLD_HOSTS
              else rows)
    traces = []
    for host, t, offset, lo, hi, _, _, _ in sorted(widest):
        traces += [
            {"type": "scatter", "mode": "lines", "x": t + t[::-1],
             "y": [_scaled(v, scale) for v in hi + lo[::-1]],
             "fill": "toself", "opacity": 0.25, "line": {"width": 0}, "name": f"{host} bounds",
             "hoverinfo": "skip", "legendgroup": host, "showlegend": False},
            {"type": "scatter", "mode": "lines+markers", "x": t, "y": [_scaled(v, scale) for v in offset],
             "name": host, "legendgroup": host, "marker": {"size": 4}}]
    figure = {"data": traces, "layout": {
        "height": 320, "margin": {"t": 20, "r": 20},
        "xaxis": {"title": {"text": "ms since the first start" + (
            f" (the {len(widest)} hosts of the widest bounds, of {len(rows)})"
            if len(widest) < len(rows) else "")}},
        "yaxis": {"title": {"text": f"offset from the reference ({unit})"}, "exponentformat": "none"}}}
    table = [{"host": host, "reference": ref, "knots": len(t),
              "worst_bound": duration_text(worst),  # each in the unit that suits it: never 8.87e+04 ns
              "timestamps": source} for host, t, _, _, _, worst, source, ref in rows]
    return {"figure": figure if rows else None, "rows": table}


def links(db: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The link audit (links.parquet, analysis/links.py): per link and step, the achieved
    one-way delay's p50 (with its p99 and the clock bound) beside the configured, and a row
    each with loss, jitter and the verdict. None to draw for a run without links."""
    if "links" not in views(db):
        return {"figure": None, "rows": []}
    rows = db.execute("""SELECT src || ' -> ' || dst, step, phase, configured_delay_ms, delay_p50_ms,
                                delay_p99_ms, delay_bound_ms, jitter_ms, configured_loss_pct, loss_pct,
                                loss_low_pct, loss_high_pct, probes_received, probes_sent, partition, within,
                                verdict, configured_jitter_ms, configured_rate_mbit
                         FROM links ORDER BY step, src, dst""").fetchall()
    names = [f"{link} · {phase}" for link, _, phase, *_ in rows]
    achieved = {"type": "bar", "name": "achieved p50 (whisker: p99)", "x": names, "y": [r[4] for r in rows],
                "error_y": {"type": "data", "symmetric": False, "array": [
                    None if r[5] is None or r[4] is None else r[5] - r[4] for r in rows],
                    "arrayminus": [0] * len(rows)},
                "marker": {"color": ["#4c78a8" if r[15] is not False else "#e45756" for r in rows]}}
    configured = {"type": "scatter", "mode": "markers", "name": "configured", "x": names,
                  "y": [r[3] for r in rows],
                  "marker": {"symbol": "line-ew-open", "size": 28, "color": "#222"}}
    figure = {"data": [achieved, configured], "layout": {
        "height": 300, "margin": {"t": 20, "r": 20}, "barmode": "overlay",
        "yaxis": {"title": {"text": "one-way delay (ms)"}, "rangemode": "tozero"}}}
    table = [{"link": link, "step": step, "phase": phase,
              "configured": "partition" if part else configured_words(cd, cj, cl, cr),
              "delay": "-" if p50 is None else f"{p50:.3f} / {p99:.3f} ms ± {bound or 0:.3f}",
              "jitter": "-" if jit is None else f"{jit:.3f} ms",
              "loss": "-" if loss is None else f"{loss:.1f} % [{lo:.1f}, {hi:.1f}]",
              "probes": f"{got}/{sent}", "verdict": words, "within": within}
             for (link, step, phase, cd, p50, p99, bound, jit, cl, loss, lo, hi, got, sent, part, within,
                  words, cj, cr) in rows]
    return {"figure": figure if rows else None, "rows": table}


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None else value / scale


def step_shapes(db: duckdb.DuckDBPyConnection, origin: int) -> list[dict[str, Any]]:
    return [{"type": "rect", "xref": "x", "yref": "paper", "x0": (lo - origin) / 1e6,
             "x1": (hi - origin) / 1e6, "y0": 0, "y1": 1, "layer": "below", "line": {"width": 0},
             "fillcolor": "rgba(76,120,168,0.10)", "name": phase} for _, phase, lo, hi, _, _ in spans(db)]


# Light for an idle cell, dark for the busiest (plotly.js's own "Blues" runs the other way).
HEAT_SCALE = [[0.0, "#f7fbff"], [0.25, "#c6dbef"], [0.5, "#6baed6"], [0.75, "#2171b5"], [1.0, "#08306b"]]
# A heatmap's rows are at least this tall, and its colour bar has a tick per this many pixels,
# so that the colour bar's labels never run into each other.
HEAT_ROW_PX, HEAT_MIN_PLOT_PX, HEAT_TICK_PX = 22, 120, 40
# A plot's title where plotly.js's toolbar (top right, on hover) does not cover it.
TITLE_LEFT = {"x": 0, "xref": "paper", "xanchor": "left"}


def _usage_heatmap(db: duckdb.DuckDBPyConnection, title: str, where: str, scale: float,
                   unit: str, of: dict[str, str],
                   cap: dict[str, float] | None = None) -> dict[str, Any] | None:
    """A heatmap of use per step and host (per group past fleet.FOLD_HOSTS hosts, `of`).
    `cap`: a host's most (its CPUs): a cell above it (a counter's window straddling a short
    step) is drawn at it and said in `capped`."""
    rows = db.execute(f"""
        SELECT step, any_value(phase) AS phase, host, sum(per_s) / {scale} AS v FROM usage
        WHERE per_s IS NOT NULL AND ({where}) GROUP BY step, host ORDER BY step, host""").fetchall()
    if not rows:
        return None
    capped = []
    for i, (s, p, h, v) in enumerate(rows):
        most = (cap or {}).get(h)
        if most is not None and v > most:
            capped.append(f"{h} in {s} {p}: {v:.3g} measured, {most:g} drawn")
            rows[i] = (s, p, h, most)
    rows = fleet.fold_cells(rows, of)
    steps = sorted({(s, p) for s, p, _, _ in rows})
    hosts = sorted({h for _, _, h, _ in rows})
    col = {s: i for i, (s, _) in enumerate(steps)}
    row = {h: i for i, h in enumerate(hosts)}
    z: list[list[float | None]] = [[None] * len(steps) for _ in hosts]
    for s, _, h, v in rows:
        z[row[h]][col[s]] = v
    plot_px = max(HEAT_MIN_PLOT_PX, HEAT_ROW_PX * len(hosts))
    return {"data": [{"type": "heatmap", "z": z, "x": [f"{s} {p}" for s, p in steps], "y": hosts,
                      "colorscale": HEAT_SCALE, "zmin": 0,
                      # a heatmap of zeros is pale throughout (not a scale of -0.5 to 0.5)
                      "zmax": max((v for _, _, _, v in rows if v is not None), default=0) or 1,
                      "colorbar": {"title": {"text": unit}, "nticks": max(2, plot_px // HEAT_TICK_PX),
                                   "tickformat": "~s" if unit != "cpus" else ".2~f", "ticks": "outside"},
                      "hovertemplate": "%{y} in %{x}: %{z:.3s} " + unit + "<extra></extra>"}],
            # the title at the left: plotly.js's toolbar sits over the plot's top right
            "layout": {"title": {"text": title, "font": {"size": 13}, **TITLE_LEFT},
                       "height": plot_px + 130,
                       "margin": {"t": 40, "r": 20, "b": 90}, "yaxis": {"automargin": True},
                       "xaxis": {"tickangle": -30, "automargin": True}},
            "capped": capped}


def cpu_caveats(hosts: Machines) -> list[str]:
    """What a CPU or network figure of the run must be read with: hosts on one kernel see the
    whole machine's CPUs, not their own (but for a container whose cgroup CAMP read: its own);
    hosts of one network namespace see its interfaces, counted once over hosts."""
    notes = [f"hosts {some_hosts(group)} share one kernel (namespaces or containers of one machine of "
             f"{_cpus_text(hosts.cpus, group)}): the CPU figure of each is of the machine they share, "
             "not its own"
             for group in hosts.cpu_shared]
    notes += [f"hosts {some_hosts(group)} share one kernel, each in a container whose cgroup CAMP read: "
              "the CPU, memory and disk figures of each are its container's own"
              for group in hosts.own_cgroup if len(group) > 1]
    notes += [f"hosts {some_hosts(group)} share one network namespace (one kernel, one address): each "
              "one's network figure is the namespace's, so a figure over hosts counts it once"
              for group in hosts.net_shared()]
    return notes


def _cpus_text(cpus: dict[str, float], group: list[str]) -> str:
    known = {cpus[h] for h in group if h in cpus}
    return f"{max(known):g} CPUs" if known else "unknown CPUs"


def resources(db: duckdb.DuckDBPyConnection, origin: int, of: dict[str, str] | None = None,
              facts: dict[str, HostFacts] | None = None) -> dict[str, Any]:
    """Per step and host the CPU, network and disk the usage table holds, as heatmaps (past
    fleet.FOLD_HOSTS hosts a row per group of `of` and the busiest hosts apart); and each
    host's CPU busy % over time with the steps shaded. A CPU figure is at most its host's
    CPUs (`facts`), and the caveats say where one was capped or hosts share a machine."""
    have = views(db)
    heatmaps = []
    hosts = machines(db, facts or {})
    cpus, caveats = hosts.cpus, cpu_caveats(hosts)
    if "usage" in have:
        for title, where, scale, unit in (
                ("CPU per step", CPU_FIELDS, 1e9, "cpus"),
                ("Network per step (sent + received, every interface)",
                 "field LIKE 'net.%.bytes_sent' OR field LIKE 'net.%.bytes_recv'", 1.0, "B/s"),
                ("Disk per step (reads + writes)", "field LIKE 'disk.%.reads' OR field LIKE 'disk.%.writes'",
                 1.0, "ops/s")):
            figure = _usage_heatmap(db, title, where, scale, unit, of or {}, cpus if unit == "cpus" else None)
            if figure:
                if figure["capped"]:
                    caveats.append(f"{len(figure['capped'])} CPU figure(s) measured above their host's CPUs "
                                   "(a counter's sampling window straddles a short step) are drawn at "
                                   f"the host's CPUs: {'; '.join(figure['capped'][:5])}")
                heatmaps.append(figure)
    busy = _busy_over_time(db, origin) if "rates" in have else None
    gone = [t for t in ("usage", "rates") if t not in have]
    return {"heatmaps": heatmaps, "busy": busy, "caveats": caveats,
            **({"missing": " ".join(missing(t)["missing"] for t in gone)} if gone else {})}


def _busy_over_time(db: duckdb.DuckDBPyConnection, origin: int) -> dict[str, Any] | None:
    span = db.execute("SELECT min(ts), max(ts), count(DISTINCT host) FROM rates WHERE field = 'cpu.busy_pct'"
                      ).fetchone()
    if span is None or span[0] is None:
        return None
    lo, hi, hosts = span
    width = max((hi - lo) // LINE_POINTS, 1)
    bucketed = """SELECT host, $lo + (ts - $lo) // $width * $width AS t, avg(rate) AS v FROM rates
                  WHERE field = 'cpu.busy_pct' GROUP BY host, t"""
    params = {"lo": lo, "width": width, "origin": origin}
    if hosts <= HOST_LINES_MAX:
        rows = db.execute(f"""SELECT host, list((t - $origin) / 1e6 ORDER BY t), list(v ORDER BY t)
                              FROM ({bucketed}) GROUP BY host ORDER BY host""", params).fetchall()
        traces = [{"type": "scatter", "mode": "lines", "name": h, "x": t, "y": v} for h, t, v in rows]
    else:
        rows = db.execute(f"""SELECT (t - $origin) / 1e6, min(v), median(v), max(v) FROM ({bucketed})
                              GROUP BY t ORDER BY t""", params).fetchall()
        t, low, mid, high = (list(c) for c in zip(*rows, strict=True))
        traces = [{"type": "scatter", "mode": "lines", "x": t + t[::-1], "y": high + low[::-1],
                   "fill": "toself", "opacity": 0.3, "line": {"width": 0},
                   "name": f"range over {hosts} hosts"},
                  {"type": "scatter", "mode": "lines", "x": t, "y": mid, "name": "median host"}]
        # the busiest hosts apart: a range does not say which host it is
        for h, ht, hv in db.execute(f"""SELECT host, list((t - $origin) / 1e6 ORDER BY t), list(v ORDER BY t)
                                        FROM ({bucketed}) GROUP BY host ORDER BY avg(v) DESC, host
                                        LIMIT {fleet.SLOW_APART}""", params).fetchall():
            traces.append({"type": "scatter", "mode": "lines", "name": f"{h} (busiest)", "x": ht, "y": hv,
                           "line": {"width": 1, "dash": "dot"}})
    return {"data": traces, "layout": {
        "height": 300, "margin": {"t": 20, "r": 20}, "shapes": step_shapes(db, origin),
        "xaxis": {"title": {"text": "ms since the first start (steps shaded)"}},
        "yaxis": {"title": {"text": "CPU busy (%)"}, "rangemode": "tozero"}}}


# At most this many events are drawn on the timeline (evenly spaced within each row).
TIMELINE_EVENTS = 3000


def timeline_events(db: duckdb.DuckDBPyConnection, origin: int,
                    row_of: dict[tuple[str, str], str]) -> dict[str, Any] | None:
    """The programs' events as ticks on the phase timeline (Perfetto's slices and instants on
    one time axis): each on its host/component's row (or its folded group's, `row_of`), at
    most TIMELINE_EVENTS in all, evenly spaced within each row; the hover names each."""
    if "events" not in views(db) or not row_of:
        return None
    pairs = list(row_of)
    rows = db.execute("""
        WITH e AS (SELECT ts, host, component, entity, tag, kind, value, data,
                          m.row_label, row_number() OVER (PARTITION BY m.row_label ORDER BY ts) AS k,
                          count(*) OVER (PARTITION BY m.row_label) AS n
                   FROM events JOIN (SELECT unnest($hosts) AS h, unnest($components) AS c,
                                            unnest($labels) AS row_label) m ON host = m.h AND component = m.c
                   WHERE kind != 'admin' AND stream NOT IN ('camp', 'clksync', 'netspecd'))
        SELECT (ts - $origin) / 1e6, row_label, host || '/' || component || ' ' || entity
               || coalesce(' tag ' || tag, ''), kind, value, left(data, 80)
        FROM e WHERE (k - 1) % greatest(ceil(n * $rows / $cap), 1) = 0 ORDER BY ts""",
                      {"hosts": [h for h, _ in pairs], "components": [c for _, c in pairs],
                       "labels": [row_of[p] for p in pairs], "origin": origin, "cap": TIMELINE_EVENTS,
                       "rows": len(set(row_of.values()))}).fetchall()
    if not rows:
        return None
    return {"type": "scatter", "mode": "markers", "name": "events", "x": [r[0] for r in rows],
            "y": [r[1] for r in rows],
            "hovertext": [r[2] + ("" if (v := value_text(*r[3:])) is None else f" {v}") for r in rows],
            "hoverinfo": "text+x",
            "marker": {"symbol": "line-ns-open", "size": 9, "color": "#333", "opacity": 0.6}}


def phases(db: duckdb.DuckDBPyConnection, facts: dict[str, HostFacts] | None = None) -> dict[str, Any]:
    """The per-phase figures (analysis/phases.py), as the page's table shows them, a machine
    hosts share (`facts`) counted once; and what the figures are to be read with."""
    if "phases" not in views(db):
        return {"notes": [], "rows": [], **missing("phases")}
    hosts = machines(db, facts or {})
    figures = phase_figures(db, hosts)
    notes = cpu_caveats(hosts)
    if capped := sum(f.capped for f in figures):
        notes.append(f"{capped} CPU figure(s) measured above their host's CPUs (a counter's sampling window "
                     "straddles a short step) are counted at the host's CPUs")
    return {"notes": notes, "rows": [{"step": f.step, "phase": f.phase, "took": duration_text(f.took_ns),
             "ok": f"{f.ok}/{f.participants}", "net": rate_text(f.net_bytes_per_s, "B/s"),
             "cpu": "-" if f.cpus_mean is None else
                    f"{f.cpus_mean:.2f} / {f.cpus_max:.2f} ({f.cpus_max_host})",
             "latency": "; ".join(f"{lat.name} p50 {duration_text(lat.p50_ns)} p99 "
                                  f"{duration_text(lat.p99_ns)} ({lat.count})" for lat in f.latencies) or "-"}
            for f in figures]}


def around(db: duckdb.DuckDBPyConnection, instant_ns: int, window_ns: int = 1_000_000_000,
           last: int = 5) -> dict[str, dict[str, Any]]:
    """Per host, around a global instant: its last events before it and its CAMP rates in the
    window either side (CPU busy, network bytes/s), for a failure's triage."""
    have = views(db)
    out: dict[str, dict[str, Any]] = {}
    params = {"t": instant_ns, "w": window_ns, "last": last}
    if "events" in have:
        for host, ms, component, entity, *said in db.execute("""
                SELECT host, (ts - $t) / 1e6, component, entity, kind, value, data
                FROM (SELECT *, row_number() OVER (PARTITION BY host ORDER BY ts DESC) AS k FROM events
                      WHERE kind != 'admin' AND stream NOT IN ('camp', 'clksync')
                            AND ts BETWEEN $t - $w AND $t)
                WHERE k <= $last ORDER BY host, ts""", params).fetchall():
            out.setdefault(host, {}).setdefault("events", []).append(
                {"ms": round(ms, 3), "component": component, "entity": entity, "data": value_text(*said)})
    if "rates" in have:
        for host, busy, net in db.execute("""
                SELECT host, avg(rate) FILTER (field = 'cpu.busy_pct'),
                       sum(rate) FILTER (field LIKE 'net.%.bytes_%') / greatest(count(DISTINCT ts), 1)
                FROM rates WHERE ts BETWEEN $t - $w AND $t + $w GROUP BY host""",
                {"t": instant_ns, "w": window_ns}).fetchall():
            out.setdefault(host, {}).update(cpu_busy=rate_text(busy, "%"), net=rate_text(net, "B/s"))
    return out


def triage(db: duckdb.DuckDBPyConnection | None, record: RunRecord, run: Path) -> dict[str, Any]:
    """Each failing participant (`timeline.failures`) and, per host at its instant, the phase
    it was in; with a result set (`db`) also its last events and CAMP rates (`around`)."""
    failed = timeline.failures(record, run)
    by_failure = []
    for f in failed:
        counters = around(db, f["instant_ns"]) if db is not None else {}
        doing = timeline.doing_at(record, f["instant_ns"])
        by_failure.append({h: {**counters.get(h, {}), "phase": doing.get(h, "")}
                           for h in sorted({*counters, *doing})})
    for f in failed:
        f["hang"] = hang(db, record, f)
    return {"failures": failed, "merged": db is not None, "around": by_failure}


def hang(db: duckdb.DuckDBPyConnection | None, record: RunRecord, f: dict[str, Any]) -> dict[str, Any] | None:
    """What a participant that never acked (ended at its step's deadline, or late) is triaged
    by: the deadline it missed, and its last sign of life: its last event on the global
    timeline and its last line of output. None for a participant that failed of itself."""
    if f["outcome"] not in HUNG:
        return None
    deadline = timeline.deadline_of(record, f["step"])
    need = record.plan.schedule[f["step"]].need if deadline is not None and record.plan is not None else None
    # The instant it missed: its start (the step sent to it, where it never entered) and the deadline.
    missed_ns = f["start_ns"] + deadline if deadline is not None else f["instant_ns"]
    out: dict[str, Any] = {
        "deadline": (f"missed the deadline of step {f['step']} ({f['phase']}): no ack within "
                     f"{duration_text(deadline)}" if deadline is not None else
                     f"no ack in step {f['step']} ({f['phase']})")
                    + (f", need {need}" if need is not None else ""),
        "last_event": None,
        "last_output": {name: next((line for line in reversed(text.splitlines()) if line.strip()), "")
                        for name, text in f["output"].items()}}
    if db is not None and f["component"] and "events" in views(db):
        row = db.execute("""SELECT (ts - $t) / 1e6, entity, tag, kind, value, data
                            FROM events WHERE host = $h AND component = $c AND kind != 'admin'
                            ORDER BY ts DESC LIMIT 1""",
                         {"t": missed_ns, "h": f["host"], "c": f["component"]}).fetchone()
        if row is not None:
            out["last_event"] = {"before_deadline": duration_text(-row[0] * 1e6), "entity": row[1],
                                 "tag": row[2], "data": value_text(*row[3:])}
    return out
