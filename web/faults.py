"""The schedule's faults as the browser shows them: markers on the phase timeline at each
fault's instant (its clock bound a whisker, its line as `report` says it on hover), a band
over each lasting one from its instant to its end (analysis/faultaudit.py's `fault_end`), the
faults table (run.json's audit, with each fault's recovery where the result set has it), and
on the operations panel each fault's line and the outage the operations saw after it."""

from __future__ import annotations

from typing import Any

import duckdb
from netspec.analysis.faultaudit import UNDOING, fault_end, fault_line
from netspec.analysis.faults import Recovery
from netspec.analysis.units import duration_text
from netspec.protocol.kinds import LINK_FAULTS
from netspec.protocol.runrecord import FaultRecord, RunRecord

MARKER_COLOUR = "#111111"
BAND_COLOUR = "rgba(228,87,86,0.28)"
OUTAGE_COLOUR = "rgba(228,87,86,0.15)"


def _row_of(fault: FaultRecord, rows: list[str]) -> str | None:
    """The timeline row a fault is drawn on: its component's, else its host's first (a
    partition's: its first direction's host)."""
    host = fault.parts[0].host if fault.parts else fault.host
    own = f"{host}/{fault.target}"
    if own in rows:
        return own
    return next((r for r in rows if r == host or r.startswith(f"{host}/")), None)


def fault_traces(record: RunRecord, rows: list[str], origin: int, run_end_ns: int) -> list[dict[str, Any]]:
    """The timeline's traces of the faults done: a band per lasting fault (to its end, or to
    `run_end_ns` if it lasted past the timeline) and a marker per fault at its instant on its
    row (the markers' name counts those whose host is folded into a group, not drawn)."""
    placed = [(f, _row_of(f, rows)) for f in record.faults if f.done_ns is not None]
    done = [(f, row) for f, row in placed if row is not None]
    # a fault whose host is folded into its group's row has no row of its own: said, not drawn
    folded = len(placed) - len(done)
    if not placed:
        return []
    bands = []
    for fault, row in done:
        end = fault_end(record.faults, fault)
        lasting = fault.kind not in (*UNDOING, "kill_daemon")  # an instant's: nothing to draw to
        if end is not None or lasting:
            stop = end.at_ns if end is not None else run_end_ns
            bands.append((row, fault, max(stop - fault.done_ns, 0), end))  # type: ignore[operator]
    traces: list[dict[str, Any]] = []
    if bands:
        traces.append({
            "type": "bar", "orientation": "h", "name": "fault, to its end", "width": 0.6,
            "marker": {"color": BAND_COLOUR}, "y": [row for row, *_ in bands],
            "base": [(f.done_ns - origin) / 1e6 for _, f, _, _ in bands],
            "x": [max(length / 1e6, 0.02) for *_, length, _ in bands],
            "hovertext": [f"fault {f.index} {f.kind} {f.target}: " + (
                f"{duration_text(length)}, to its end" + (f" (fault {e.by})" if e.by is not None else "")
                if e is not None else "to the run's end") for _, f, length, e in bands],
            "hoverinfo": "text"})
    traces.append({
        "type": "scatter", "mode": "markers",
        "name": f"fault ({folded} more on folded hosts: expand their group)" if folded else "fault",
        "y": [row for _, row in done],
        "x": [(f.done_ns - origin) / 1e6 for f, _ in done],  # type: ignore[operator]
        "marker": {"symbol": "x-thin-open", "size": 11, "color": MARKER_COLOUR, "line": {"width": 2}},
        "error_x": {"type": "data", "array": [(f.bound_ns or 0) / 1e6 for f, _ in done], "thickness": 1},
        "hovertext": [fault_line(f) for f, _ in done], "hoverinfo": "text",
        "customdata": [[f.index] for f, _ in done]})
    return traces


def fault_rows(record: RunRecord, recovered: list[Recovery]) -> list[dict[str, Any]]:
    """The faults table: a row per fault of the file, its instant planned and done, its
    effect, its end and its recovery (`recovered`: the result set's, empty without one)."""
    by_index = {r.index: r for r in recovered}
    out = []
    for fault in record.faults:
        end = fault_end(record.faults, fault)
        bound = "unsynchronised" if fault.unsynchronised else \
            f"± {duration_text(fault.bound_ns)}" if fault.bound_ns is not None else ""
        effect_after = (f", {duration_text(fault.effect_after_ns)} after" if fault.effect_after_ns is not None
                        else "")
        recovery = by_index.get(fault.index)
        ended = "-"
        if end is not None and fault.done_ns is not None:
            ended = f"{duration_text(end.at_ns - fault.done_ns)} after" + (
                f" (fault {end.by})" if end.by is not None else "")
        what = f"{fault.host} | {fault.target}" if fault.kind in LINK_FAULTS else fault.target
        out.append({
            "index": fault.index, "kind": fault.kind, "host": fault.host,
            "what": what + (f" (role {fault.role})" if fault.role is not None else ""),
            "at": f"{fault.phase or 'run'}+{fault.after_s:g}s",
            "late": "not done" if fault.done_ns is None else
                    f"{duration_text(fault.late_ns)} {bound}" if fault.late_ns is not None else "done",
            "effect": f"{fault.effect}{effect_after}" if fault.effect else "-",
            "end": ended,
            "recovery": recovery.figures() if recovery is not None else "-",
            "error": fault.error or ("unfinished: the run ended first" if fault.unfinished else ""),
            "failed": bool(fault.error)})
    return out


def outage_shapes(db: duckdb.DuckDBPyConnection, origin: int) -> list[dict[str, Any]]:
    """The operations panel's: a line at each fault's instant, and a band from it to the
    first success of an operation asked after it (faults.parquet's `recovered_ts`)."""
    rows = db.execute("SELECT done_ts, recovered_ts FROM faults WHERE done_ts IS NOT NULL").fetchall()
    shapes = []
    for done, recovered in rows:
        x0 = (done - origin) / 1e6
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x0, "x1": x0, "y0": 0, "y1": 1,
                       "line": {"color": MARKER_COLOUR, "width": 1, "dash": "dot"}})
        if recovered is not None and recovered > done:
            shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": x0,
                           "x1": (recovered - origin) / 1e6, "y0": 0, "y1": 1, "line": {"width": 0},
                           "fillcolor": OUTAGE_COLOUR, "layer": "below"})
    return shapes
