"""A run page's fleet view: hosts in groups, each step's n/N ok per group, the failed and the
slowest participants named, and the timeline's hosts folded into a row per group above
FOLD_HOSTS hosts (a group expanded on request). What the first screen of a run at 300 hosts
answers: did it work, and where did the time go.

Groups are the experiment's host groups (run.json's plan); the hosts no group declares are
grouped by their name without its trailing number (`web-017` is in `web`), and hosts whose
names share no stem are one group.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from typing import Any

from netspec.analysis.units import duration_text
from netspec.protocol.outcome import FAILING, FINE, WORST_FIRST, Outcome
from netspec.protocol.runrecord import RunRecord

from .timeline import Bar, bars, deaths

# Above this many hosts the timeline, heatmaps and tables fold hosts into their groups.
FOLD_HOSTS = 12
# At most this many failed or slow participants are named on the first screen (the count of the rest is said).
NAMED_MAX = 8
# A participant is slow in a step when it is far out among the step's participants (Tukey's
# fence: past the third quartile by SLOW_FENCE_IQR interquartile ranges, so that a step whose
# every participant took a little longer than its median names none) and at least
# SLOW_MARGIN_NS over the median (a few ms over a median of a few ms is the machine's jitter).
# The slow are named by how much longer than the median they took, the most first: a ratio
# would put a 25 ms blip over a 1 ms median ahead of a host a second late.
SLOW_FENCE_IQR = 3.0
SLOW_MARGIN_NS = 20_000_000
# The outcomes a group's folded bar takes, worst first.
_STEM = re.compile(r"[-_.]?\d+$")


def groups(record: RunRecord) -> dict[str, list[str]]:
    """Group name -> its hosts, in name order; every host in exactly one group."""
    hosts = record.host_names
    declared = record.plan.groups if record.plan is not None else {}
    out: dict[str, list[str]] = {}
    placed: set[str] = set()
    for name, members in sorted(declared.items()):
        mine = [h for h in members if h in hosts and h not in placed]
        placed.update(mine)
        if mine:
            out[name] = mine
    by_stem: dict[str, list[str]] = {}
    for h in hosts:
        if h not in placed:
            by_stem.setdefault(_STEM.sub("", h) or h, []).append(h)
    if len(by_stem) == len(hosts) - len(placed) and not out:  # no two hosts share a stem: one group
        return {"all": list(hosts)} if hosts else {}
    if len(by_stem) == len(hosts) - len(placed) and by_stem:  # the hosts no group declares
        by_stem = {"ungrouped": [h for hs in by_stem.values() for h in hs]}
    return dict(sorted({**by_stem, **out}.items()))


def group_of(record: RunRecord) -> dict[str, str]:
    return {h: g for g, members in groups(record).items() for h in members}


def folds(record: RunRecord) -> bool:
    return len(record.host_names) > FOLD_HOSTS


def group_row(group: str, sizes: dict[str, int]) -> str:
    """A folded group's row on the timeline."""
    return f"{group} ({sizes.get(group, 0)} hosts)"


def folded(record: RunRecord, expand: Iterable[str] = ()) -> list[Bar]:
    """The timeline's bars with each group not in `expand` folded into one bar per step: from
    its first start to its last end, in its worst outcome, its hover saying n/N ok and its
    slowest. Below FOLD_HOSTS hosts, every bar as it is."""
    run_bars = bars(record)
    if not folds(record):
        return run_bars
    of, sizes, keep = group_of(record), {g: len(m) for g, m in groups(record).items()}, set(expand)
    out, gathered = [], {}
    for b in run_bars:
        g = of.get(b.host, "ungrouped")
        if g in keep:
            out.append(b)
        else:
            gathered.setdefault((b.step, g), []).append(b)
    for (step, g), mine in gathered.items():
        worst = min(mine, key=lambda b: WORST_FIRST.index(b.outcome))
        start = min(b.start_ns for b in mine)
        acked = [b for b in mine if b.took_ns is not None]
        end = max((b.end_ns for b in acked), default=None)
        slowest = max(acked, key=lambda b: b.took_ns, default=None)
        ok = sum(b.outcome in FINE for b in mine)
        said = f"{ok}/{len(mine)} ok" + (f"; slowest {slowest.row} {duration_text(slowest.took_ns)}"
                                        if slowest else "")
        bound = max((b.bound_ns for b in mine if b.bound_ns is not None), default=None)
        out.append(Bar(step, mine[0].phase, group_row(g, sizes), "", worst.outcome, start, bound,
                       None if end is None else end - start, said, acked=end is not None))
    return sorted(out, key=lambda b: (b.step, b.row))


def rows_of(record: RunRecord, run_bars: list[Bar]) -> dict[tuple[str, str], str]:
    """(host, component) -> its row on a timeline drawn from `run_bars` (its own, or its
    folded group's)."""
    drawn = {b.row for b in run_bars}
    of, sizes = group_of(record), {g: len(m) for g, m in groups(record).items()}
    out = {}
    for b in bars(record):
        if not b.component:
            continue
        own = b.row if b.row in drawn else group_row(of.get(b.host, "ungrouped"), sizes)
        out[(b.host, b.component)] = own
    return {k: v for k, v in out.items() if v in drawn}


def overview(record: RunRecord) -> dict[str, Any]:
    """The first screen: per step its n/N ok over the fleet and per group, its median and
    slowest participant; the failed participants and the slow ones, named."""
    run_bars = bars(record)
    named_groups = groups(record)
    of = group_of(record)
    by_step: dict[int, list[Bar]] = {}
    for b in run_bars:
        by_step.setdefault(b.step, []).append(b)
    rows, slow = [], []
    for index, step in enumerate(record.steps):
        mine = by_step.get(index, [])
        cells = [_cell(mine)] + [_cell([b for b in mine if of.get(b.host) == g]) for g in named_groups]
        took = sorted(b.took_ns for b in mine if b.took_ns is not None)
        median = statistics.median(took) if took else None
        slowest = max((b for b in mine if b.took_ns is not None), key=lambda b: b.took_ns, default=None)
        if median is not None and len(took) >= 3:
            q1, _, q3 = statistics.quantiles(took, n=4, method="inclusive")
            fence = q3 + SLOW_FENCE_IQR * (q3 - q1)
            slow += [(b.took_ns - median, b, median) for b in mine if b.took_ns is not None
                     and b.took_ns > fence and b.took_ns - median >= SLOW_MARGIN_NS]
        rows.append({"step": index, "phase": step.phase, "status": step.status, "cells": cells,
                     "median": duration_text(median),
                     "slowest": f"{slowest.row} {duration_text(slowest.took_ns)}" if slowest else "-"})
    failed = [b for b in run_bars if b.outcome in FAILING
              and (b.outcome != Outcome.WAITING or record.steps[b.step].status == "failed")]
    named = [{"row": b.row, "outcome": b.outcome, "phase": b.phase, "step": b.step,
              "message": b.message[:160]} for b in failed]
    named += deaths(record, {b.row for b in failed})
    slow.sort(key=lambda s: (-s[0], s[1].row))
    return {
        "groups": [{"name": g, "hosts": len(m), "first": m[0], "last": m[-1]}
                   for g, m in named_groups.items()],
        "rows": rows, "hosts": len(record.host_names), "folds": folds(record),
        # what the timeline spans: the first participant's start to the last one's end
        "span": duration_text(max(b.end_ns for b in run_bars) - min(b.start_ns for b in run_bars))
                if run_bars else "-",
        "failed": named[:NAMED_MAX],
        "failed_more": max(len(named) - NAMED_MAX, 0),
        "slow": [{"row": b.row, "phase": b.phase, "step": b.step, "took": duration_text(b.took_ns),
                  "median": duration_text(median), "over": duration_text(over),
                  "ratio": f"{b.took_ns / median:.1f}x" if median else "-"}
                 for over, b, median in slow[:NAMED_MAX]],
        "slow_more": max(len(slow) - NAMED_MAX, 0)}


def _cell(mine: list[Bar]) -> dict[str, Any]:
    ok = sum(b.outcome in FINE for b in mine)
    bad = sum(b.outcome in FAILING for b in mine)
    state = "none" if not mine else "ok" if ok == len(mine) else "failed" if bad else "partial"
    return {"ok": ok, "of": len(mine), "state": state}


# Past this many hosts a distribution draws per group, and the hosts of the slowest p99 apart.
SLOW_APART = 3


def labels(hosts_slowest_first: list[str], of: dict[str, str], most: int) -> dict[str, str]:
    """Host -> the label its values are drawn under: itself while there are at most `most`
    hosts; else its group, but for the SLOW_APART slowest hosts (drawn apart, named) and hosts
    past `most` groups ("other hosts", said in the label)."""
    if len(hosts_slowest_first) <= most:
        return {h: h for h in hosts_slowest_first}
    apart = hosts_slowest_first[:SLOW_APART]
    out = {h: f"{h} (slow)" for h in apart}
    kept: list[str] = []
    for h in sorted(hosts_slowest_first[SLOW_APART:]):
        g = of.get(h, "other hosts")
        if g not in kept and len(kept) < most - SLOW_APART - 1:
            kept.append(g)
        out[h] = g if g in kept else "other hosts"
    sizes: dict[str, int] = {}
    for label in out.values():
        sizes[label] = sizes.get(label, 0) + 1
    return {h: label if h in apart else f"{label} ({sizes[label]} hosts)" for h, label in out.items()}


Cell = tuple[int, str, str, float]


def fold_cells(rows: list[Cell], of: dict[str, str]) -> list[Cell]:
    """A heatmap's (step, phase, host, value) cells past FOLD_HOSTS hosts: a row per group (its
    hosts' mean) and the SLOW_APART busiest hosts (their sum over the steps) apart."""
    hosts = {h for _, _, h, _ in rows}
    if len(hosts) <= FOLD_HOSTS:
        return rows
    totals: dict[str, float] = {}
    for _, _, h, v in rows:
        totals[h] = totals.get(h, 0.0) + (v or 0.0)
    busiest = sorted(totals, key=lambda h: -totals[h])[:SLOW_APART]
    sums: dict[tuple[int, str, str], list[float]] = {}
    size = {g: sum(1 for h in hosts if of.get(h, "ungrouped") == g) for g in set(of.values()) | {"ungrouped"}}
    for step, phase, h, v in rows:
        if v is not None:
            g = of.get(h, "ungrouped")
            sums.setdefault((step, phase, f"{g} ({size[g]} hosts, mean)"), []).append(v)
    return sorted([(s, p, label, sum(vs) / len(vs)) for (s, p, label), vs in sums.items()]
                  + [(s, p, f"{h} (busiest)", v) for s, p, h, v in rows if h in busiest])
