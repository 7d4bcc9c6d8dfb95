"""A fan-out tree's summary of plain acks: what a relay sends up in place of the acks of
each host whose every component acked a step ok, so that the controller's work per step
does not grow with the fleet (docs/protocol.md, "acks").

A summary counts the acks and the hosts, names the slowest hosts (the longest from entry
to last ack, on each host's clock), keeps the two ends of the step's release skew and the
widest spread within the bounds (of the daemons' starts, and of the programs' callbacks:
`programs`), lists the starts that could not be placed or were late for their instant,
and holds each ack's run.json entry as msgpack bytes. Relays join
their children's bytes without reading them; the controller appends them to the run's
ack journal (ackjournal.ACK_JOURNAL) without reading them either, and run.json gets them
when the run ends (runjournal.fold_acks).
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable
from typing import Any

import msgpack

from .kinds import Ack, Mark, Summary
from .messages import ACK_OK

SLOWEST = 3
# An ack with status ok and none of these is folded; any other (a warning, an error, a
# launch's phases, sync_clocks' clock, published values) goes up as itself: the controller
# acts on what they say.
MEANINGFUL = ("phases", "published", "clock", "traceback")
FLAGS = ("unsynchronised", "realtime_refused")
COMPRESS_FROM = 4096  # bytes of records: about 40 hosts' acks


def is_plain(ack: Ack) -> bool:
    return ack.status == ACK_OK and not any(getattr(ack, k) for k in MEANINGFUL)


def start_on_timeline(ack: Ack) -> dict[str, Any]:
    """What a component's step entry keeps of the start its ack reports: the start on the
    global timeline and its bound (from the ack's entry clock), and with `release: at`
    how late the step reached the host for its instant, if it did."""
    kept: dict[str, Any] = {}
    if ack.entry_clock is not None:
        offset, bound = ack.entry_clock
        kept.update(start_ns=ack.entered - offset, start_bound_ns=bound)
        if ack.started is not None:
            # The program's own start of its callback, on its host's clock (nodelib stamps it):
            # where the participant starts, placed by the same estimate, milliseconds apart.
            kept["program_start_ns"] = ack.started - offset
    release = ack.release
    if release is None:
        return kept
    for said in ("at_ns", "bound_ns"):  # the instant on the host's clock, and how far off it may be
        if getattr(release, said) is not None:
            kept[f"release_{said}"] = getattr(release, said)
    if release.missed_ns:
        kept["release_missed_ns"] = release.missed_ns
    for said in FLAGS:
        if getattr(release, said):
            kept[f"release_{said}"] = True
    return kept


def entry(ack: Ack) -> dict[str, Any]:
    """A component's entry in its step's record, but for when the controller received it:
    every stamp the ack declares (kinds.Ack) that the record keeps."""
    return {"status": ack.status, "message": ack.message, "entered_ns": ack.entered, "acked_ns": ack.acked,
            **({"started_ns": ack.started} if ack.started is not None else {}), **start_on_timeline(ack)}


class Spread:
    """Starts on the global timeline: how many, the first and the last ([start_ns,
    "host/component"]), and the widest spread within their bounds (low, high)."""

    def __init__(self) -> None:
        self.count = 0
        self.first: Mark | None = None
        self.last: Mark | None = None
        self.low: int | None = None  # the earliest start minus its bound
        self.high: int | None = None  # the latest start plus its bound

    def add(self, count: int, first: Mark, last: Mark, low: int, high: int) -> None:
        first, last = tuple(first), tuple(last)  # type: ignore[assignment]
        if self.count == 0:
            self.first, self.last, self.low, self.high = first, last, low, high
        else:
            self.first = min(self.first, first)  # type: ignore[type-var]
            self.last = max(self.last, last)  # type: ignore[type-var]
            self.low, self.high = min(self.low, low), max(self.high, high)  # type: ignore[type-var]
        self.count += count

    def one(self, start: int, bound: int, who: str) -> None:
        self.add(1, (start, who), (start, who), start - bound, start + bound)

    def wire(self) -> list[Any]:
        return [self.count, self.first, self.last, self.low, self.high]

    def said(self) -> dict[str, Any]:
        """Its spread by the estimates (`skew_ns`), its ends, and the widest it can be
        (`at_most_ns`); nothing for fewer than two starts."""
        if self.count < 2 or self.first is None or self.last is None:
            return {}
        return {"skew_ns": self.last[0] - self.first[0], "first": self.first[1], "last": self.last[1],
                "at_most_ns": self.high - self.low}  # type: ignore[operator]


class AckSummary:
    """Plain acks folded: built by a relay from its own host's acks and its children's
    summaries, merged by the controller from its first level's."""

    def __init__(self) -> None:
        self.acks = self.hosts = 0
        self.slowest: list[list[Any]] = []  # [took_ns, host], slowest first
        self.daemons = Spread()  # where each daemon began the phase
        self.programs = Spread()  # where each program began its callback
        self.unplaced: list[str] = []  # acks without a clock estimate
        self.missed: dict[str, int] = {}
        self.flagged: dict[str, list[str]] = {flag: [] for flag in FLAGS}
        self.records: list[bytes] = []

    def add_host(self, host: str, acks: list[Ack]) -> None:
        """Every ack of `host` in the step, each plain."""
        self.acks += len(acks)
        self.hosts += 1
        took = max(a.acked for a in acks) - min(a.entered for a in acks)
        self._slow([(took, host)])
        for ack in acks:
            kept = entry(ack)
            self.add_start(f"{host}/{ack.component}", kept)
            self.records.append(msgpack.packb([host, ack.component, kept]))

    def add_start(self, who: str, kept: dict[str, Any]) -> None:
        """The start of one participant (`who`: host/component), from its step entry."""
        if "start_ns" in kept:
            self.daemons.one(kept["start_ns"], kept["start_bound_ns"], who)
            if "program_start_ns" in kept:
                self.programs.one(kept["program_start_ns"], kept["start_bound_ns"], who)
        else:
            self.unplaced.append(who)
        if kept.get("release_missed_ns"):
            self.missed[who] = kept["release_missed_ns"]
        for flag in FLAGS:
            if kept.get(f"release_{flag}"):
                self.flagged[flag].append(who)

    def merge(self, wire: Summary, keep_records: bool = True) -> None:
        """Fold in a summary from below, checked by `problem` first."""
        self.acks += wire.acks
        self.hosts += wire.hosts
        self._slow(wire.slowest)
        if wire.starts:
            self.daemons.add(wire.starts, wire.first, wire.last, wire.low, wire.high)  # type: ignore[arg-type]
        if wire.programs[0]:  # a relay of an older netspec sends none
            self.programs.add(*wire.programs)  # type: ignore[arg-type]
        self.unplaced.extend(wire.unplaced)
        self.missed.update(wire.missed)
        for flag in FLAGS:
            self.flagged[flag].extend(getattr(wire, flag))
        if keep_records:
            self.records.append(wire.records)

    def wire(self, compress: bool = False) -> Summary:
        """The summary as it goes up; `compress` (to the controller) deflates its records
        where they are many: the controller's work per step is mostly the records' bytes, and
        they shrink 5x, but deflating costs 70 us however few they are."""
        records = b"".join(self.records)
        compress = compress and len(records) >= COMPRESS_FROM
        daemons = self.daemons
        return Summary(acks=self.acks, hosts=self.hosts, slowest=self.slowest, starts=daemons.count,
                       first=daemons.first, last=daemons.last, low=daemons.low, high=daemons.high,
                       programs=self.programs.wire(), unplaced=self.unplaced, missed=self.missed,
                       **self.flagged, records=zlib.compress(records, 1) if compress else records,
                       zlib=compress)

    def _slow(self, slowest: list[Any]) -> None:
        if slowest:
            self.slowest = sorted([*self.slowest, *slowest], key=lambda s: s[0], reverse=True)[:SLOWEST]


def problem(wire: Summary, allowed: Callable[[str], bool], compressed: bool = False) -> str | None:
    """What is wrong with a summary from below, None if nothing. Its shape was checked
    where it was read (kinds.Summary); here, what only the tree knows: every host it names
    must be `allowed` (a host of the sender's subtree), and its records are deflated only
    where `compressed` (a relay joins its children's records as they are, so they come to
    it as they are); their entries are checked as they are folded into run.json."""
    if wire.zlib and not compressed:
        return "a summary with compressed records from below"
    marks = [*((wire.first, wire.last) if wire.starts else ()),
             *(wire.programs[1:3] if wire.programs[0] else ())]
    whos = itertools.chain((e[1] for e in marks if e is not None), wire.missed, wire.unplaced,
                           *(getattr(wire, flag) for flag in FLAGS))
    named = [s[1] for s in wire.slowest] + [w.partition("/")[0] for w in whos]
    strangers = sorted({h for h in named if not allowed(h)})
    return f"a summary naming hosts {strangers[:5]} outside its subtree" if strangers else None
