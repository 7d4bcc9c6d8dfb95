"""A run's phases as the browser shows them, from its typed record alone (so a run in
progress and a run never merged show them too): one bar per step and participant from its
start to its ack on the global timeline, the steps' table with their release skew, and what a
failed step says of its failing participants. Every participant a step's record names has its
bar, as `ns_control show` lists it, those that never acked too.

A participant's start is on the global timeline where its daemon had a clock estimate
(`start_ns` ± `start_bound_ns`); before sync_clocks it is its host's own clock, said so.
Its length is measured on one clock (ack - enter), so it is exact. One that never acked
starts when the controller sent its host the step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netspec.analysis.units import duration_text
from netspec.protocol.exits import describe_returncode
from netspec.protocol.outcome import FAILING, Outcome, decide
from netspec.protocol.runrecord import Release, RunRecord, Step

from .catalog import inside
from .faults import fault_traces

# The colours of a participant's outcome, the same in every panel and in the legend.
OUTCOME_COLOURS = {Outcome.OK: "#4c78a8", Outcome.WARNING: "#f2a93b", Outcome.LATE: "#b279a2",
                   Outcome.ERROR: "#e45756", Outcome.KILLED: "#9d2b2b", Outcome.SCHEDULED: "#7b4fa0",
                   Outcome.SKIPPED: "#bab0ac", Outcome.ENDED: "#8c8c8c", Outcome.RUNNING: "#72b7b2",
                   Outcome.WAITING: "#c7c7c7"}
# Every step's name is written over the timeline; names that would overlap are stacked in
# rows by the page (netspec.js's unclutter measures them as drawn).
# A step's row in the steps table shows this many of its participants' ack messages.
ACK_MESSAGES = 6


@dataclass(frozen=True)
class Bar:
    step: int
    phase: str
    host: str
    component: str  # "": a host sent the step of which no participant acked (waiting)
    outcome: Outcome  # protocol/outcome.py
    start_ns: int
    bound_ns: int | None  # None: the start is on a clock of its own, not placed
    took_ns: int | None  # None: no ack (killed, skipped, or the step still runs)
    message: str
    acked: bool = True  # False: it never acked, and starts when the controller sent its host the step
    deadline_ns: int | None = None  # killed at its step's deadline: how long after its start

    @property
    def row(self) -> str:
        return f"{self.host}/{self.component}" if self.component else self.host

    @property
    def end_ns(self) -> int:
        """Its ack; or, killed at its deadline, the deadline; else its start."""
        return self.start_ns + (self.took_ns if self.took_ns is not None else self.deadline_ns or 0)


def deadline_of(record: RunRecord, index: int) -> int | None:
    """Step `index`'s deadline (ns) as the experiment planned it, if the record has its plan."""
    schedule = record.plan.schedule if record.plan is not None else []
    if index < len(schedule) and schedule[index].phase == record.steps[index].phase:
        return int(schedule[index].deadline_s * 1e9)
    return None


def bars(record: RunRecord) -> list[Bar]:
    """One bar per step and participant, in step then row order: every participant the step
    record names, as `ns_control show` lists them. One that never acked (ended at the step's
    deadline, skipped, or still out) has no start of its own: its bar starts when the
    controller sent its host the step, placed through the controller's clock offset. So does
    a host sent the step that no participant of acked (its daemon lost, or the step under
    way): a bar of its own, `waiting`, as `show` says it."""
    out = []
    for index, step in enumerate(record.steps):
        deadline = deadline_of(record, index)
        for host, part in sorted(step.hosts.items()):
            if not part.components and (part.sent_ns is not None or step.sent_ns is not None):
                start, bound = _sent(record, step, host)
                out.append(Bar(index, step.phase, host, "", Outcome.WAITING, start, bound, None,
                               "sent the step; no participant on this host acked it", acked=False))
        for host, name, entry in sorted(step.participants(), key=lambda p: p[:2]):
            said = decide(entry, deadline)
            if entry.entered_ns is None:
                start, bound = _sent(record, step, host)
                out.append(Bar(index, step.phase, host, name, said, start, bound, None, entry.message,
                               acked=False, deadline_ns=deadline if said == Outcome.KILLED else None))
                continue
            took = entry.acked_ns - entry.entered_ns if entry.acked_ns is not None else None
            placed = entry.start_ns is not None
            message = entry.message
            if said == Outcome.KILLED and entry.outcome != Outcome.KILLED:
                message = f"no ack within the deadline of {duration_text(deadline)}: {message}"
            out.append(Bar(index, step.phase, host, name, said,
                           entry.start_ns if placed else entry.entered_ns,
                           entry.start_bound_ns if placed else None, took, message))
    return out


def _sent(record: RunRecord, step: Step, host: str) -> tuple[int, int | None]:
    """When the controller sent `host` the step, on the global timeline with its bound where
    the run has the controller's offset from the reference; else on the controller's clock."""
    part = step.hosts.get(host)
    sent = ((part.sent_ns if part is not None else None) or step.sent_ns or step.entered_ns
            or record.started_ns)
    clocks = record.clksync
    if clocks is not None and clocks.controller_offset_ns is not None \
            and clocks.controller_offset_bound_ns is not None:
        return sent - clocks.controller_offset_ns, clocks.controller_offset_bound_ns
    return sent, None


def origin_ns(record: RunRecord, run_bars: list[Bar] | None = None) -> int:
    """The instant every panel's time axis counts from: the first participant's start."""
    starts = [b.start_ns for b in (run_bars if run_bars is not None else bars(record))]
    return min(starts) if starts else record.started_ns


def _hover(b: Bar, first_end: dict[int, int]) -> str:
    if not b.acked:
        where = ("never acked: drawn from when the controller sent its host the step"
                 + (f" ± {duration_text(b.bound_ns)}" if b.bound_ns is not None else
                    " (on the controller's clock: not placed)"))
    elif b.bound_ns is not None:
        where = f"start ± {duration_text(b.bound_ns)}"
    else:
        where = "start on the host's own clock (before sync_clocks: not placed)"
    after = (f"<br>acked {duration_text(b.end_ns - first_end[b.step])} after the step's first ack"
             if b.took_ns is not None and b.end_ns > first_end.get(b.step, b.end_ns) else "")
    message = f"<br>{b.message[:200]}" if b.message else ""
    return (f"<b>{b.row}</b> in {b.phase} (step {b.step})<br>{b.outcome}, took {duration_text(b.took_ns)}"
            f"<br>{where}{after}{message}")


def timeline_figure(record: RunRecord, run_bars: list[Bar] | None = None) -> dict[str, Any]:
    """The phase timeline as a Plotly figure: a row per host/component, a bar per step from
    its start to its ack (ms since the first start), the start's error bound as a whisker,
    each outcome its colour, each step shaded with its name where it fits."""
    run_bars = bars(record) if run_bars is None else run_bars  # or a fleet's, folded (fleet.py)
    origin = origin_ns(record, run_bars)
    rows = sorted({b.row for b in run_bars})
    first_end: dict[int, int] = {}
    for b in run_bars:
        if b.took_ns is not None:
            first_end[b.step] = min(first_end.get(b.step, b.end_ns), b.end_ns)
    spans = _spans(run_bars)
    traces = []
    for outcome, colour in OUTCOME_COLOURS.items():
        mine = [b for b in run_bars if b.outcome == outcome]
        if not mine:
            continue
        traces.append({
            "type": "bar", "orientation": "h", "name": outcome, "marker": {"color": colour},
            "y": [b.row for b in mine], "base": [(b.start_ns - origin) / 1e6 for b in mine],
            # a bar killed at its deadline is drawn to it; another unacked one to its step's end
            "x": [max((b.end_ns - b.start_ns if b.took_ns is not None or b.deadline_ns
                       else spans[b.step][1] - b.start_ns) / 1e6, 0.02) for b in mine],
            "hovertext": [_hover(b, first_end) for b in mine], "hoverinfo": "text",
            "customdata": [[b.step, b.host, b.component] for b in mine]})
    placed = [b for b in run_bars if b.bound_ns and b.acked]
    if placed:
        traces.append({
            "type": "scatter", "mode": "markers", "name": "start ± bound", "y": [b.row for b in placed],
            "x": [(b.start_ns - origin) / 1e6 for b in placed], "marker": {"size": 3, "color": "#333"},
            "error_x": {"type": "data", "array": [b.bound_ns / 1e6 for b in placed], "thickness": 1,
                        "width": 2},
            "hoverinfo": "skip"})
    traces += _lifetimes(record, run_bars, origin)
    if run_bars:
        traces += fault_traces(record, rows, origin, max(b.end_ns for b in run_bars))
    shapes, annotations = _step_spans(record, spans, origin)
    return {"data": traces, "layout": {
        "barmode": "overlay", "height": max(220, 90 + 22 * len(rows)), "shapes": shapes,
        "annotations": annotations, "showlegend": True,
        # beside the rows it explains, at their top: not under a fleet's hundreds of rows
        "legend": {"orientation": "v", "x": 1.01, "xanchor": "left", "y": 1, "yanchor": "top"},
        "xaxis": {"title": {"text": "ms since the first start (global timeline)"}, "zeroline": False},
        "yaxis": {"categoryorder": "array", "categoryarray": rows[::-1], "automargin": True},
        "margin": {"t": 40, "r": 20, "b": 60}}}


def _lifetimes(record: RunRecord, run_bars: list[Bar], origin: int) -> list[dict[str, Any]]:
    """A background `command:` (one with `stop:`) as a thin bar over its process's lifetime,
    from its start to its end, on its row: its host's clock placed on the global timeline by
    the offset its own steps' starts had there."""
    background = {(c.host, c.name) for c in (record.plan.components if record.plan else [])
                  if c.command and c.stop}
    offsets: dict[str, int] = {}
    for step in record.steps:
        for host, _, entry in step.participants():
            if None not in (entry.start_ns, entry.entered_ns, entry.start_bound_ns):
                offsets[host] = entry.start_ns - entry.entered_ns
    rows = {b.row for b in run_bars}
    lives = []
    for host, name in sorted(background):
        end = record.components.get(f"{host}/{name}")
        if end is None or end.ended_ns is None or end.duration_s is None or f"{host}/{name}" not in rows:
            continue
        ended = end.ended_ns + offsets.get(host, 0)
        lives.append((f"{host}/{name}", ended - int(end.duration_s * 1e9), ended, end.returncode))
    if not lives:
        return []
    return [{"type": "bar", "orientation": "h", "name": "background command's lifetime", "width": 0.25,
             "marker": {"color": "rgba(60,60,60,0.55)"}, "y": [row for row, *_ in lives],
             "base": [(lo - origin) / 1e6 for _, lo, _, _ in lives],
             "x": [(hi - lo) / 1e6 for _, lo, hi, _ in lives],
             "hovertext": [f"<b>{row}</b>: its process ran {duration_text(hi - lo)}, exit status {code}"
                           for row, lo, hi, code in lives], "hoverinfo": "text"}]


def _spans(run_bars: list[Bar]) -> dict[int, list[int]]:
    """Each step's first start and last end among its bars."""
    spans: dict[int, list[int]] = {}
    for b in run_bars:
        lo_hi = spans.setdefault(b.step, [b.start_ns, b.end_ns])
        lo_hi[0], lo_hi[1] = min(lo_hi[0], b.start_ns), max(lo_hi[1], b.end_ns)
    return spans


def _step_spans(record: RunRecord, spans: dict[int, list[int]], origin: int) -> tuple[list, list]:
    if not spans:
        return [], []
    shapes, annotations = [], []
    for index, (lo, hi) in sorted(spans.items()):
        step = record.steps[index]
        failed = step.status == "failed"
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": (lo - origin) / 1e6,
                       "x1": (hi - origin) / 1e6, "y0": 0, "y1": 1, "layer": "below", "line": {"width": 0},
                       "fillcolor": "rgba(228,87,86,0.18)" if failed else
                       ("rgba(0,0,0,0.04)" if index % 2 else "rgba(0,0,0,0.0)")})
        annotations.append({"x": (lo + hi - 2 * origin) / 2e6, "y": 1.0, "xref": "x", "yref": "paper",
                            "yanchor": "bottom", "showarrow": False, "name": "step",
                            "text": step.phase + (" ✕" if failed else ""),
                            "font": {"size": 11, "color": "#e45756" if failed else "#555"}})
    return shapes, annotations


def step_rows(record: RunRecord) -> list[dict[str, Any]]:
    """The steps' table: phase, status, how long, the release and its skew, the slowest."""
    rows = []
    counts_of: dict[int, dict[str, int]] = {}
    for b in bars(record):
        counts = counts_of.setdefault(b.step, {})
        counts[b.outcome] = counts.get(b.outcome, 0) + 1
    for index, step in enumerate(record.steps):
        release = step.release
        acks = [(entry.acked_ns - entry.entered_ns, f"{host}/{name}")
                for host, name, entry in step.participants()
                if entry.acked_ns is not None and entry.entered_ns is not None]
        counts = counts_of.get(index, {})
        slowest = max(acks, default=None)
        said = [f"{host}/{name}: {entry.message}" for host, name, entry in sorted(step.participants(),
                                                                                    key=lambda p: p[:2])
                if entry.message]
        rows.append({
            "step": index, "phase": step.phase, "status": step.status,
            "took": duration_text(step.duration_s * 1e9) if step.duration_s is not None else "-",
            "release": release.mode,
            "skew": _skew(release, "skew_ns"), "skew_at_most": _skew(release, "at_most_ns"),
            "troubles": "; ".join(release.troubles()),  # as `show` says them
            "outcomes": ", ".join(f"{n} {o}" for o, n in sorted(counts.items())),
            "slowest": f"{slowest[1]} {duration_text(slowest[0])}" if slowest else "-",
            # what the participants' acks said (a component's result line), the first few
            "messages": said[:ACK_MESSAGES] + ([f"and {len(said) - ACK_MESSAGES} more (run.json has them)"]
                                              if len(said) > ACK_MESSAGES else [])})
    return rows


def _skew(release: Release, key: str) -> str:
    """A step's release skew (or its bound: `key`) where the programs started, beside the
    daemons' (the programs' is what the participants saw; the daemons' is the release's alone)."""
    ns = getattr(release, key)
    daemons = duration_text(ns) if ns is not None else "-"
    program = getattr(release.program, key, None)
    return f"{duration_text(program)} programs, {daemons} daemons" if program is not None else daemons


def failures(record: RunRecord, run: Path, tail_lines: int = 30) -> list[dict[str, Any]]:
    """Each failing participant of the run's failed steps: where, why, its traceback and the
    last lines of its output (from the run directory), and the global instant it failed at."""
    out = []
    for b in bars(record):
        step = record.steps[b.step]
        if b.outcome not in FAILING or (b.outcome == Outcome.WAITING and step.status != "failed"):
            continue
        entry = step.hosts[b.host].components.get(b.component)
        out.append({"step": b.step, "phase": b.phase, "host": b.host, "component": b.component,
                    "outcome": b.outcome, "message": _host_cause(record, b) if entry is None else b.message,
                    "traceback": entry.traceback if entry is not None else "",
                    "instant_ns": b.end_ns, "start_ns": b.start_ns,
                    "output": {name: _tail(run, f"hosts/{b.host}/{b.component}/{name}", tail_lines)
                               if b.component else "" for name in ("stdout", "stderr")}})
    return out


def deaths(record: RunRecord, named: set[str]) -> list[dict[str, Any]]:
    """The components whose process died mid-run with no one asking (a SIGKILL from outside:
    their end `failed`) that no row of `named` lists: each a failure of the run, said with
    its signal, in the step its daemon said it died in (else the step the run failed in)."""
    failed_in = next((i for i, s in enumerate(record.steps) if record.error is not None
                      and s.phase == record.error.phase), len(record.steps) - 1)
    out = []
    for row, end in sorted(record.components.items()):
        if end.failed and row not in named:
            step = end.step if end.step is not None and end.step < len(record.steps) else failed_in
            out.append({"row": row, "outcome": "died", "step": step,
                        "phase": record.steps[step].phase if record.steps else "-",
                        "message": f"{describe_returncode(end.returncode)}, no one asked it to end"})
    return out


def _host_cause(record: RunRecord, b: Bar) -> str:
    """What the run's error says of a host none of whose participants acked its failed step."""
    said = f"phase '{b.phase}', host {b.host}: "
    causes = record.error.causes if record.error is not None else []
    return next((cause.removeprefix(said) for cause in causes if cause.startswith(said)), b.message)


def _tail(run: Path, name: str, lines: int) -> str:
    """The last `lines` lines of the run's file `name` (read from its end: an output can be
    gigabytes); none of a file not in the run (`catalog.inside`: the record's names, or a
    link, leading out of it), said."""
    path = inside(run, name)
    if path is None:
        return f"(not shown: {name} leads out of the run)" if os.path.lexists(run / name) else ""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def doing_at(record: RunRecord, instant_ns: int) -> dict[str, str]:
    """What each host was doing at a global instant: the phases its components were in, or
    the last step it had acked (waiting at the barrier) or that it had not begun yet."""
    inside: dict[str, list[str]] = {}
    before: dict[str, Bar] = {}
    run_bars = bars(record)
    for b in run_bars:
        if b.outcome == Outcome.SKIPPED:  # out of the run since an earlier step: not in this one
            continue
        if b.start_ns <= instant_ns and (b.took_ns is None or b.end_ns >= instant_ns):
            inside.setdefault(b.host, []).append(f"{b.component} in {b.phase}" if b.component
                                                 else f"sent {b.phase}, no ack")
        elif (b.took_ns is not None and b.end_ns < instant_ns
              and (b.host not in before or b.end_ns > before[b.host].end_ns)):
            before[b.host] = b
    hosts = {b.host for b in run_bars}
    return {h: ", ".join(inside[h]) if h in inside else
            (f"had acked {before[h].phase} {duration_text(instant_ns - before[h].end_ns)} before"
             if h in before else "not begun") for h in sorted(hosts)}
