"""The audit of a run's link conditions: per link (a directed pair of hosts) and per step,
what was configured against what the probes (netspec.links.probes) achieved: one-way delay
p50 and p99 with the clock bounds of both ends, jitter, loss with its Wilson 95 % interval,
rate where a backend's counters say it, and a verdict. Written as merged/links.parquet
(columns in docs/results.md).

Each probe is on the global timeline twice: its send (`LINKS/sent` on the sender, at the
sender's stamp) and its receipt (`LINKS/probe` on the receiver, at the kernel's stamp), each
converted by its host's clock fit with its bound. A probe belongs to the step in whose
window it was sent: from the step's first entry to the next step's (the last step's to its
last ack); probes sent in a window's first GUARD_NS (a change of conditions still in
flight), or outside every window are left out, and counted; so are those in flight across an
edge: sent within GUARD_NS and the link's flight time (its delay, and three times its
jitter) before a scheduled partition's start or end (or GUARD_NS after it), before the next
step's change of the link took effect (at that step's release, before its first entry), or
before the end of the run's last window, when its conditions are removed. A scheduled
partition's window (run.json's `faults`) is audited apart, as the fault's: partitioned; the
rest of its step as the link's.
"""

# Version history of links.parquet: 1; 2: changed_at and changed_bound_ns, when the step's
# change of the link took effect; 3: `fault`, a scheduled partition's own rows; 4 (this): the
# TCP probes' columns, tcp_* (linktcp.py), and user_overruns (the path's own losses, apart
# from the link's: user_drops).

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from netspec.datastream.schema import ProbeCounts, ProbeRecord, SentRecord, TcpProbeRecord
from netspec.links.probes import WIRE_OVERHEAD
from netspec.protocol.links import LinkStats
from netspec.protocol.runrecord import RunRecord

from . import linktcp
from .faultaudit import direction_end, direction_instants

GUARD_NS = 20_000_000
Z95 = 1.959963984540054
# Tolerances (issue 40's bench targets): delay p50 within max(5 %, 100 us) of the configured
# delay on the kernel's path, max(5 %, 250 us) on the user-space path (and when the backend
# is not said); rate within 5 %; loss: the configured rate inside the achieved's 95 % interval.
DELAY_SHARE = 0.05
DELAY_FLOOR_NS = {"kernel": 100_000, "netem": 100_000, "user": 250_000}
DEFAULT_DELAY_FLOOR_NS = 250_000
RATE_SHARE = 0.05
# The user-space path is the bottleneck when it released over 10 % of packets late, dropped
# any, or its threads were busy over 80 % of the time (one of them is all it has).
LATE_SHARE = 0.10
BUSY_SHARE = 0.80

COLUMNS = pa.schema([
    ("src", pa.string()), ("dst", pa.string()), ("step", pa.int32()), ("phase", pa.string()),
    ("start", pa.int64()), ("end", pa.int64()), ("fault", pa.int32()), ("backend", pa.string()),
    ("configured_delay_ms", pa.float64()), ("configured_jitter_ms", pa.float64()),
    ("configured_loss_pct", pa.float64()), ("configured_rate_mbit", pa.float64()),
    ("partition", pa.bool_()), ("changed_at", pa.int64()), ("changed_bound_ns", pa.int64()),
    ("probes_sent", pa.int64()), ("probes_received", pa.int64()), ("probe_rate_per_s", pa.float64()),
    ("probe_share_pct", pa.float64()),
    ("delay_p50_ms", pa.float64()), ("delay_p99_ms", pa.float64()), ("delay_bound_ms", pa.float64()),
    ("jitter_ms", pa.float64()), ("loss_pct", pa.float64()), ("loss_low_pct", pa.float64()),
    ("loss_high_pct", pa.float64()), ("rate_mbit", pa.float64()),
    ("user_late_pct", pa.float64()), ("user_drops", pa.int64()), ("user_overruns", pa.int64()),
    ("user_cpu_pct", pa.float64()),
    ("bottleneck", pa.bool_()),
    ("tcp_probes", pa.int64()), ("tcp_failed", pa.int64()), ("tcp_connect_ms", pa.float64()),
    ("tcp_request_ms", pa.float64()), ("tcp_burst_ms", pa.float64()), ("tcp_burst_expected_ms", pa.float64()),
    ("within", pa.bool_()), ("verdict", pa.string())])


@dataclass(frozen=True)
class Condition:
    """What a link was configured to do during a step (None: not configured)."""

    delay_ms: float | None = None
    jitter_ms: float | None = None
    loss_pct: float | None = None
    rate_mbit: float | None = None
    partition: bool = False
    backend: str | None = None  # which backend applied the delay (else its first part): netem, user...
    # When the step's change of the link took effect (global ns, the midpoint of the window
    # it took effect in, and its bound: the clock's and half the window); None: unchanged.
    changed_at: int | None = None
    changed_bound_ns: int | None = None
    # The scheduled partitions of this direction: (fault index, done_ns, ended_ns or None: to
    # the run's end). Probes sent in one are the fault's, audited as partitioned.
    faults: tuple[tuple[int, int, int | None], ...] = ()


@dataclass(frozen=True)
class Configured:
    """What run.json says the links were configured to do: each directed pair's condition in
    each step, and when each step's change of a pair took effect (at_ns, bound_ns), a change
    that cleared the pair's condition too (it has no condition in that step, but its change
    still ends the step before at its release)."""

    conditions: dict[tuple[str, str, int], Condition] = field(default_factory=dict)
    changes: dict[tuple[str, str, int], tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Counters:
    """What a link's backends counted during a step: its achieved rate (qdisc bytes over the
    window), the user-space path's share of packets released late, its drops and its CPU."""

    rate_mbit: float | None = None
    user_late_pct: float | None = None
    user_drops: int | None = None  # the packets it dropped for the link's loss
    user_overruns: int | None = None  # those its host's path lost, unable to keep up
    user_cpu_pct: float | None = None
    saturated: bool = False  # the rate's class held packets back (overlimits): the link was full
    # Its host's path thread was refused real-time priority (a container's cgroup has no
    # real-time budget): its copies wait for a core, and its delays come out longer.
    realtime_refused: bool = False


@dataclass
class Audit:
    """The audit's rows and what it left out."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    outside: int = 0  # probes sent outside every step's window, or in a window's guard
    undecodable: int = 0
    refused: dict[str, int] = field(default_factory=dict)  # host -> datagrams not this run's probes

    def warnings(self) -> list[str]:
        said = [f"links: host {host} refused {n} datagrams on the audit's probe port (not this run's probes: "
                "another run's, or garbled)" for host, n in sorted(self.refused.items()) if n]
        if self.undecodable:
            said.append(f"links: {self.undecodable} probe records whose data does not fit their form "
                        "were left out of links.parquet")
        return said


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion k/n (0..1)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    # At k = 0 (or n) the bound is 0 (or 1) exactly: the float sum leaves a crumb of it.
    return (0.0 if k == 0 else max(0.0, centre - half), 1.0 if k == n else min(1.0, centre + half))


def windows(db: duckdb.DuckDBPyConnection) -> list[tuple[int, str, int, int]]:
    """Each step's window on the global timeline from phases.parquet: (step, phase, start, end)."""
    rows = db.execute("""SELECT step, any_value(phase), min(entered), max(acked) FROM phases
                         WHERE entered IS NOT NULL GROUP BY step ORDER BY step""").fetchall()
    found = []
    for i, (step, phase, start, last) in enumerate(rows):
        end = rows[i + 1][2] if i + 1 < len(rows) else (last if last is not None else start)
        found.append((int(step), str(phase), int(start), int(end)))
    return found


def _decoded(texts: list[tuple[Any, ...]], kind: type[msgspec.Struct], audit: Audit) -> list[tuple[Any, ...]]:
    out = []
    for *head, data in texts:
        try:
            out.append((*head, msgspec.json.decode(data, type=kind)))
        except (msgspec.ValidationError, msgspec.DecodeError, TypeError):
            audit.undecodable += 1
    return out


def _has(db: duckdb.DuckDBPyConnection, table: str) -> bool:
    return bool(db.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table])
                .fetchall()[0][0])


def increase(values: list[int]) -> int:
    """What a counter read at each of `values` counted meanwhile: the sum of its increases
    between consecutive reads. A read below the one before is a reset (its nft table made
    anew, its htb class renumbered, its peer dropped by the user-space path): it counted
    that read's value since."""
    return sum(now - was if now >= was else now for was, now in itertools.pairwise(values))


def counters(db: duckdb.DuckDBPyConnection, steps: list[tuple[int, str, int, int]],
             audit: Audit) -> dict[tuple[str, str, int], Counters]:
    """Each link's counters over each step, from the `LINKS/stats` events its sender logged
    (protocol.links.LinkStats, read every half second): the increases between consecutive
    reads in the window (`increase`: a counter reset counts from zero). A link and step with
    fewer than two reads has none."""
    reads: dict[str, list[tuple[int, LinkStats]]] = {}
    for ts, host, stats in _decoded(db.execute("""SELECT ts, host, data FROM events
                                                  WHERE entity = 'LINKS/stats' AND kind = 'event'
                                                  ORDER BY ts""").fetchall(), LinkStats, audit):
        reads.setdefault(host, []).append((ts, stats))
    cpu: dict[str, list[tuple[int, float]]] = {}
    # A number as an event's data is its value (analysis/source.py).
    for host, ts, seconds in db.execute("""SELECT host, ts, value FROM events
                                           WHERE entity = 'LINKS/user_cpu' AND kind = 'event'
                                           AND value IS NOT NULL ORDER BY ts""").fetchall():
        cpu.setdefault(host, []).append((ts, seconds))
    found = {}
    for step, _, start, end in steps:
        for host, got in reads.items():
            used = [(ts, s) for ts, s in cpu.get(host, []) if start <= ts < end]
            cpu_pct = (100 * (used[-1][1] - used[0][1]) / ((used[-1][0] - used[0][0]) / 1e9)
                       if len(used) > 1 and used[-1][0] > used[0][0] else None)
            inside = [(ts, s) for ts, s in got if start <= ts < end]
            if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
                continue
            seconds = (inside[-1][0] - inside[0][0]) / 1e9
            # The host's path lost packets of its own (its queue's or its socket's overruns):
            # not a loss of the links', a sign it could not keep up.
            overran = increase([s.queue_overruns for _, s in inside])
            for peer in inside[-1][1].peers:
                reads_of = [s.peers.get(peer) for _, s in inside]
                if reads_of[0] is None:
                    continue

                def grew(name: str, of: list[Any] = reads_of) -> int:
                    return increase([getattr(r, name) if r is not None else 0 for r in of])
                sent, queued, released = grew("rate_packets"), grew("queued"), grew("released")
                # Late is a share of the copies sent in the window, both counted as each goes
                # (a run before `released` was counted: of those queued, which a step's
                # packets held into the next can outnumber, so at most all of them).
                late = grew("late_over_1ms")
                late_pct = (100 * late / released if released else
                            min(100.0, 100 * late / queued) if queued else None)
                found[(host, peer, step)] = Counters(
                    rate_mbit=grew("rate_bytes") * 8 / seconds / 1e6 if sent else None,
                    user_late_pct=late_pct,
                    user_drops=grew("dropped_user") if queued else None,
                    user_cpu_pct=cpu_pct if queued else None,
                    user_overruns=overran if queued else None,
                    saturated=_full(reads_of),
                    realtime_refused=bool(queued) and any(s.realtime is False for _, s in inside))
    return found


def _full(reads: list[Any]) -> bool:
    """Whether a link's rate class held packets back (its overlimits grew) in at least half of
    the intervals between its counters' reads, and in two at least: a link kept full, not one
    a burst filled for a moment (the TCP probes' 64 KB, or the experiment's own), whose mean
    rate over the step is no measure of what the class lets through."""
    values = [r.rate_overlimits if r is not None else 0 for r in reads]
    grew = sum(1 for was, now in itertools.pairwise(values) if now > was)
    return grew >= max(2, (len(values) - 1) / 2)


def audit(db: duckdb.DuckDBPyConnection, links: Configured,
          read: dict[tuple[str, str, int], Counters] | None = None) -> Audit:
    """The audit's rows from a result set's events and phases: one per link and step that
    probes crossed or conditions named; the backends' counters from the run's `LINKS/stats`
    events unless given (`read`)."""
    configured = links.conditions
    result = Audit()
    if not _has(db, 'events') or not _has(db, 'phases'):
        return result
    # A send is logged on its sender: the event's host.
    sends = _decoded(db.execute("""SELECT ts, bound_ns, host, data FROM events WHERE entity = 'LINKS/sent'
                                   AND kind = 'event'""").fetchall(), SentRecord, result)
    probes = _decoded(db.execute("""SELECT ts, bound_ns, data FROM events WHERE entity = 'LINKS/probe'
                                    AND kind = 'event'""").fetchall(), ProbeRecord, result)
    received = {(p.src, p.dst, p.seq): (ts, bound) for ts, bound, p in probes}
    for host, counts in _decoded(db.execute("""SELECT host, data FROM events WHERE entity = 'LINKS/counts'
                                               AND kind = 'event'""").fetchall(), ProbeCounts, result):
        result.refused[host] = counts.refused
    steps = windows(db)
    starts = np.array([w[2] for w in steps], dtype=np.int64)

    def placed(ts: int, src: str, dst: str) -> tuple[int, int | None] | None:
        """The step a probe sent at `ts` belongs to, and the scheduled partition it was sent
        in (None: none); None if it is left out."""
        i = int(np.searchsorted(starts, ts, side="right")) - 1
        if i < 0 or ts >= steps[i][3] or ts < steps[i][2] + GUARD_NS:
            return None
        cond_now = configured.get((src, dst, steps[i][0]), Condition())
        cuts, flight = cond_now.faults, _flight_ns(cond_now)
        # A probe is in flight from its send to its send plus the link's delay (and jitter):
        # one in flight across an edge (a partition's start or end, the next step's change,
        # the conditions' removal at the run's end) met two conditions, and is left out.
        if any(edge - flight - GUARD_NS <= ts < edge + GUARD_NS
               for _, began, ended in cuts for edge in (began, ended) if edge):
            return None
        # The next step's change takes effect at its release, before its first entry ends this
        # window: what was sent within GUARD_NS and its flight of it (and its bound) crossed it.
        following = links.changes.get((src, dst, steps[i + 1][0])) if i + 1 < len(steps) else None
        if following is not None and ts >= following[0] - following[1] - GUARD_NS - flight:
            return None
        if i + 1 == len(steps) and ts >= steps[i][3] - GUARD_NS - flight:
            return None  # the run's last window: its conditions are removed as it ends
        return steps[i][0], next((index for index, began, ended in cuts
                                  if began <= ts and (ended is None or ts < ended)), None)

    groups: dict[tuple[str, str, int, int | None], list[tuple[int, int, int | None, int | None]]] = {}
    for ts, bound, src, sent in sends:
        where = placed(ts, src, sent.dst)
        if where is None:
            result.outside += 1
            continue
        got = received.get((src, sent.dst, sent.seq))
        groups.setdefault((src, sent.dst, *where), []).append(
            (ts, bound if bound is not None and bound >= 0 else 0, *(got or (None, None)), sent.size))
    tcp: dict[tuple[str, str, int, int | None], list[TcpProbeRecord]] = {}
    for ts, src, probe in _decoded(db.execute("""SELECT ts, host, data FROM events WHERE entity = 'LINKS/tcp'
                                                 AND kind = 'event'""").fetchall(), TcpProbeRecord, result):
        where = placed(ts, src, probe.dst)
        if where is not None:
            tcp.setdefault((src, probe.dst, *where), []).append(probe)
    by_step = {w[0]: w for w in steps}
    read = counters(db, steps, result) if read is None else read
    keys = set(groups) | {(*k, None) for k in configured if k[2] in by_step}
    for src, dst, step, cond in ((k[0], k[1], k[2], c) for k, c in configured.items() if k[2] in by_step):
        _, _, start, end = by_step[step]
        keys |= {(src, dst, step, index) for index, began, ended in cond.faults
                 if began < end and (ended is None or ended > start)}
    for key in sorted(keys, key=lambda k: (k[0], k[1], k[2], -1 if k[3] is None else k[3])):
        src, dst, step, fault = key
        cond = configured.get((src, dst, step), Condition())
        window = by_step[step]
        if fault is None:
            counted = read.get((src, dst, step), Counters())
            row = _row((src, dst, step), window, groups.get(key, []), cond, counted,
                       linktcp.figures(tcp.get(key, []), cond.rate_mbit))
        else:  # the fault's part of the step: its own, partitioned by the schedule
            began, ended = next((b, e) for i, b, e in cond.faults if i == fault)
            clipped = (step, window[1], max(window[2], began),
                       window[3] if ended is None else min(window[3], ended))
            row = _row((src, dst, step), clipped, groups.get(key, []),
                       Condition(partition=True), Counters())
        row["fault"] = fault
        result.rows.append(row)
    return result


def _flight_ns(cond: Condition) -> int:
    """How long a probe of a link under `cond` is in flight at most: its delay and three
    standard deviations (or half-widths) of its jitter."""
    return int(((cond.delay_ms or 0.0) + 3 * (cond.jitter_ms or 0.0)) * 1e6)


def _ms(ns: float | None) -> float | None:
    return None if ns is None or math.isnan(ns) else ns / 1e6


def _row(key: tuple[str, str, int], window: tuple[int, str, int, int], probes: list[tuple[Any, ...]],
         cond: Condition, count: Counters, tcp: linktcp.TcpFigures | None = None) -> dict[str, Any]:
    src, dst, step = key
    _, phase, start, end = window
    sent = len(probes)
    arrived = [(r - s, b + (rb if rb is not None and rb >= 0 else 0))
               for s, b, r, rb, _ in probes if r is not None]
    delays = np.array([d for d, _ in arrived], dtype=float)
    bound = max((b for _, b in arrived), default=None)
    lost = sent - len(arrived)
    lo, hi = wilson(lost, sent)
    span_s = max((end - start - GUARD_NS) / 1e9, 1e-9)
    per_s = sent / span_s
    row: dict[str, Any] = {
        "src": src, "dst": dst, "step": step, "phase": phase, "start": start, "end": end,
        "backend": cond.backend, "configured_delay_ms": cond.delay_ms, "configured_jitter_ms": cond.jitter_ms,
        "configured_loss_pct": cond.loss_pct, "configured_rate_mbit": cond.rate_mbit,
        "partition": cond.partition, "changed_at": cond.changed_at, "changed_bound_ns": cond.changed_bound_ns,
        "probes_sent": sent, "probes_received": len(arrived),
        "probe_rate_per_s": per_s,
        "probe_share_pct": (100 * per_s * (max(p[4] for p in probes) + WIRE_OVERHEAD) * 8
                            / (cond.rate_mbit * 1e6) if cond.rate_mbit and probes else None),
        "delay_p50_ms": _ms(float(np.percentile(delays, 50))) if len(delays) else None,
        "delay_p99_ms": _ms(float(np.percentile(delays, 99))) if len(delays) else None,
        "delay_bound_ms": _ms(bound),
        "jitter_ms": _ms(float(delays.std(ddof=1))) if len(delays) > 1 else None,
        "loss_pct": 100 * lost / sent if sent else None,
        "loss_low_pct": 100 * lo if sent else None, "loss_high_pct": 100 * hi if sent else None,
        "rate_mbit": count.rate_mbit, "user_late_pct": count.user_late_pct, "user_drops": count.user_drops,
        "user_overruns": count.user_overruns,
        "user_cpu_pct": count.user_cpu_pct,
        "bottleneck": (None if count.user_late_pct is None
                       else count.user_late_pct > 100 * LATE_SHARE or bool(count.user_overruns)
                       or (count.user_cpu_pct or 0.0) > 100 * BUSY_SHARE),
        **(tcp or linktcp.TcpFigures()).columns(),
    }
    row["within"], row["verdict"] = verdict(row, cond, count.saturated, count.realtime_refused)
    return row


def verdict(row: dict[str, Any], cond: Condition, saturated: bool = False,
            realtime_refused: bool = False) -> tuple[bool | None, str]:
    """Whether the link did what it was configured to do in this step, and the words for it:
    `within tolerance`, or each way it was off and by how much; and, where its user-space
    path ran without real-time priority, that too (a cause of a delay off, or a warning)."""
    off = []
    if row["probes_sent"] == 0:
        return None, "no probes in this step"
    if cond.partition:
        if row["probes_received"]:
            off.append(f"partition leaked {row['probes_received']} of {row['probes_sent']} probes")
    else:
        if cond.delay_ms is not None and row["delay_p50_ms"] is not None:
            floor = DELAY_FLOOR_NS.get(cond.backend or "", DEFAULT_DELAY_FLOOR_NS) / 1e6
            tol = max(DELAY_SHARE * cond.delay_ms, floor) + (row["delay_bound_ms"] or 0.0)
            diff = row["delay_p50_ms"] - cond.delay_ms
            if abs(diff) > tol:
                off.append(f"delay p50 {row['delay_p50_ms']:.3f} ms, {diff:+.3f} ms off {cond.delay_ms:g} ms "
                           f"(tolerance {tol:.3f} ms)")
        elif cond.delay_ms is not None:
            off.append("no probe came through to measure the delay")
        loss = cond.loss_pct or 0.0
        lo, hi = row["loss_low_pct"], row["loss_high_pct"]
        if row["loss_pct"] is not None and not lo - 1e-9 <= loss <= hi + 1e-9:
            off.append(f"loss {row['loss_pct']:.1f} % [{lo:.1f}, {hi:.1f}] against {loss:g} %")
        # A link's traffic may stay under its rate: only a rate above it, or one below it
        # while the link was full (its class held packets back), is off.
        rate = row["rate_mbit"]
        if cond.rate_mbit and rate is not None and (rate > (1 + RATE_SHARE) * cond.rate_mbit or (
                saturated and rate < (1 - RATE_SHARE) * cond.rate_mbit)):
            off.append(f"rate {rate:.2f} Mbit/s against {cond.rate_mbit:g}"
                       + (" (the link full)" if saturated else ""))
        changed = linktcp.changes(row)
        if changed:
            off.append(changed)
    if row["bottleneck"]:
        cpu = "" if row["user_cpu_pct"] is None else f", {row['user_cpu_pct']:.0f} % CPU"
        lost = row.get("user_overruns")
        overran = f", {lost} packets lost unable to keep up" if lost else ""
        off.append(f"netspec's user-space path was the bottleneck ({row['user_late_pct']:.1f} % late"
                   f"{overran}{cpu})")
    said = "within tolerance" if not off else "; ".join(off)
    if realtime_refused:
        said += ("; its user-space path ran without real-time priority (refused: a container's cgroup "
                 "has no real-time budget), so its copies waited for a free core")
    return (not off), said


def configured_links(record: RunRecord) -> Configured:
    """Each directed pair's conditions in each step, as run.json's plan records them (the
    state the controller resolved for every step: PlanStep.link_state, "from->to"), with the
    backend its sending host placed them on (the step's change's placements, else the last
    before it, else the host's at launch) and the scheduled partitions of that direction (a
    partition fault's window: from when it was done to its `for`'s end, a later heal of it,
    or the run's end); and when each step's change of a pair took effect (LinkChange.pairs),
    a change that cleared the pair's condition included. A run without a plan, or with no
    links:, configures nothing: the audit then reports what any probes achieved, against no
    condition. Steps are the plan's schedule in order; a run whose steps stop matching it (a
    phase that differs) is read up to there."""
    plan = record.plan
    if plan is None:
        return Configured()
    cuts: dict[tuple[str, str], list[tuple[int, int, int | None]]] = {}
    for fault in record.faults:
        if fault.kind != "partition":
            continue
        for direction in fault.directions():
            done = direction_instants(fault, direction)[0]
            if done is None:
                continue
            end = direction_end(record.faults, fault, direction)  # its `for`'s, or a heal of it after
            cuts.setdefault(direction, []).append((fault.index, done, end.at_ns if end is not None else None))
    placed: dict[tuple[str, str], dict[str, str]] = {}
    for host, said in record.hosts.items():
        if said.links is not None:
            for peer, backends in said.links.placements.items():
                placed[(host, peer)] = dict(backends.parts)
    found, changes = {}, {}
    for i, (ran, planned) in enumerate(zip(record.steps, plan.schedule, strict=False)):
        if ran.phase != planned.phase:
            break
        for host, change in ran.links.items():
            for peer, backends in change.placements.items():
                placed[(host, peer)] = dict(backends.parts)
            if change.at_ns is not None:
                for pair in change.pairs:
                    src, _, dst = pair.partition("->")
                    changes[(src, dst, i)] = (change.at_ns, change.bound_ns or 0)
        for pair, cond in planned.link_state.items():
            src, _, dst = pair.partition("->")
            parts = placed.get((src, dst), {})
            change = ran.links.get(src)
            changed = change is not None and pair in change.pairs
            found[(src, dst, i)] = Condition(
                # a delay given as 0 (its path kept: LinkCondition.path) is one, of 0 ms
                delay_ms=cond.delay_ms if cond.delay_ms or cond.path else None,
                jitter_ms=cond.jitter_ms or None,
                loss_pct=cond.loss_pct or None, rate_mbit=cond.rate_mbit, partition=cond.partition,
                backend=parts.get("delay") or next(iter(parts.values()), None),
                changed_at=change.at_ns if changed else None,
                changed_bound_ns=change.bound_ns if changed else None,
                faults=tuple(cuts.get((src, dst), ())))
    return Configured(found, changes)


def write_links(db: duckdb.DuckDBPyConnection, path: Path, configured: Configured,
                read: dict[tuple[str, str, int], Counters] | None = None) -> Audit:
    """links.parquet from the result set open in `db`; nothing is written for a run without
    probes or conditions."""
    result = audit(db, configured, read)
    if result.rows:
        pq.write_table(pa.Table.from_pylist(result.rows, schema=COLUMNS), path)
    else:
        path.unlink(missing_ok=True)  # an earlier merge's
    return result


def lines(db: duckdb.DuckDBPyConnection) -> list[str]:
    """The audit's section of the report: one line per link and step, then the verdicts
    that are off. Empty for a run without links.parquet."""
    if not _has(db, "links"):
        return []
    columns = {c[0] for c in db.execute("DESCRIBE links").fetchall()}
    fault = "fault" if "fault" in columns else "NULL"  # links.parquet before version 3: none
    rows = db.execute(f"""SELECT src, dst, phase, {fault}, configured_delay_ms, configured_jitter_ms,
                                configured_loss_pct, configured_rate_mbit, delay_p50_ms, delay_p99_ms,
                                delay_bound_ms, jitter_ms, loss_pct, loss_low_pct, loss_high_pct,
                                rate_mbit, probes_received, probes_sent, partition, verdict
                         FROM links ORDER BY step, src, dst, {fault} NULLS FIRST""").fetchall()
    out = ["Links (configured against achieved, from the audit's probes):",
           f"  {'link':<20} {'phase':<12} {'configured':<32} {'delay p50':>9} {'p99':>8} {'±bound':>8} "
           f"{'jitter':>7} {'loss % [95 %]':>20} {'Mbit/s':>7} {'probes':>9}  verdict"]
    for (src, dst, phase, faulted, cd, cj, cl, cr, p50, p99, bound, jit, loss, lo, hi, rate, got, sent, part,
         words) in rows:
        said = (f"fault {faulted}: partition" if faulted is not None else "partition" if part
                else configured_words(cd, cj, cl, cr))
        out.append(f"  {src + ' -> ' + dst:<20} {phase:<12} {said:<32} {_num(p50):>9} {_num(p99):>8} "
                   f"{_num(bound):>8} {_num(jit):>7} {_loss(loss, lo, hi):>20} {_num(rate, 2):>7} "
                   f"{got:>4}/{sent:<4}  {words}")
    return out + linktcp.lines(db) if "tcp_probes" in columns else out


def configured_words(delay_ms: float | None, jitter_ms: float | None, loss_pct: float | None,
                     rate_mbit: float | None) -> str:
    """A link's configured condition in a few words: each part it has, in its unit."""
    words = []
    if delay_ms is not None:
        words.append(f"{delay_ms:g} ms" + (f" ± {jitter_ms:g}" if jitter_ms else ""))
    elif jitter_ms:
        words.append(f"± {jitter_ms:g} ms")
    if loss_pct:
        words.append(f"{loss_pct:g} % loss")
    if rate_mbit:
        words.append(f"{rate_mbit:g} Mbit/s")
    return ", ".join(words) or "none"


def merged_lines(merged: Path) -> list[str]:
    """The audit's section for the result set in `merged` (`ns_control report`): empty when
    it has no links.parquet."""
    path = merged / "links.parquet"
    if not path.is_file():
        return []
    db = duckdb.connect()
    try:
        quoted = str(path).replace("'", "''")
        db.execute(f"CREATE VIEW links AS SELECT * FROM read_parquet('{quoted}')")
        return lines(db)
    finally:
        db.close()


def _num(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _loss(loss: float | None, lo: float | None, hi: float | None) -> str:
    return "-" if loss is None else f"{loss:.1f} [{lo:.1f}, {hi:.1f}]"
