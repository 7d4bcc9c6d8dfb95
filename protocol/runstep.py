"""A step of run.json as it ran (protocol/runrecord.py's RunRecord keeps them in `steps`):
each participant's entry, each host's part, its release as planned and measured, and the one
reading of what went wrong with that release, for `show` and the browser alike.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .errors import some_hosts
from .links import Backends
from .outcome import Outcome


class Spread(msgspec.Struct):
    """Starts on the global timeline (protocol/acksummary.py's `Spread.said`): how many, their
    spread by the estimates (`skew_ns`), the participants at its ends (host/component), and the
    widest it can be within their bounds (`at_most_ns`); no spread for fewer than two."""

    starts: int = 0
    skew_ns: int | None = None
    first: str | None = None
    last: str | None = None
    at_most_ns: int | None = None


class Release(Spread):
    """A step's release (controller/engine/release.py): its mode (`at` an instant, else by
    message), with `at` the instant planned on the reference clock and on the controller's
    and the lead it was sent with; once the step ended, the spread of the daemons' starts of
    the phase (the top level's), of the programs' callbacks (`program`), and every start that
    could not be placed, missed its instant (by how much), had no clock estimate for the
    instant or was refused real-time priority for its wake-up."""

    mode: str = "message"
    instant_ns: int | None = None
    lead_s: float | None = None
    instant_controller_ns: int | None = None
    unplaced: list[str] = []  # host/component of each start without a clock estimate
    missed_ns: dict[str, int] = {}
    unsynchronised: list[str] = []
    realtime_refused: list[str] = []
    program: Spread | None = None

    @property
    def headline_ns(self) -> int | None:
        """The release skew in one figure: the programs' where they stamped their starts, else
        the daemons'; None if fewer than two starts were placed."""
        program = self.program
        return program.skew_ns if program is not None and program.skew_ns is not None else self.skew_ns

    def troubles(self) -> list[str]:
        """What went wrong with the release, each in a few words: what `show` prints under the
        step and the browser in its steps' table alike."""
        parts = []
        if missed := self.missed_ns:
            parts.append(f"{len(missed)} participant(s) got the step after its instant "
                         f"(latest by {max(missed.values()) / 1e6:.1f} ms: {some_hosts(missed, 3)})")
        # By message, a start without an estimate is only unknown (before sync_clocks, all are):
        # said where a skew is given all the same, or the step is released at an instant.
        if self.unplaced and (self.mode == "at" or self.skew_ns is not None):
            parts.append(f"{len(self.unplaced)} start(s) without a clock estimate, left out of the skew: "
                         f"{some_hosts(self.unplaced, 3)}")
        if self.unsynchronised:
            parts.append(f"{len(self.unsynchronised)} took the instant on their own clock (no estimate)")
        if self.realtime_refused:
            parts.append(f"{len(self.realtime_refused)} woke without real-time priority (refused)")
        return parts


class Entry(msgspec.Struct, omit_defaults=True):
    """A participant's entry in a step: its ack as the controller received it (every `_ns`
    on its host's clock but `received_ns`, `start_ns` and `program_start_ns`, on the global
    timeline), and what became of it (`outcome`)."""

    status: str = ""  # ok, warning, error (protocol/messages.py)
    message: str = ""
    entered_ns: int | None = None  # when its daemon began the phase: None if it never acked
    acked_ns: int | None = None
    started_ns: int | None = None  # when the program began its callback (nodelib's stamp)
    start_ns: int | None = None  # entered_ns placed on the global timeline, +- start_bound_ns
    program_start_ns: int | None = None
    start_bound_ns: int | None = None
    release_at_ns: int | None = None  # a `release: at` instant on its host's clock
    release_bound_ns: int | None = None
    release_missed_ns: int | None = None
    release_unsynchronised: bool = False
    release_realtime_refused: bool = False
    received_ns: int | None = None
    # what became of it, where its ack alone does not say (protocol/outcome.py: `decide` reads it)
    outcome: Outcome | None = None
    traceback: str = ""
    late_ns: int | None = None
    died: bool = False  # its process died in the step (a k-of-n step fails over)


class StepHost(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A host's part in a step: its components' entries (always written), when the step was
    sent to it and when its last participant acked (on the controller's clock)."""

    components: dict[str, Entry]
    sent_ns: int | None = None
    done_ns: int | None = None


class Summarized(msgspec.Struct):
    """What a fan-out tree folded of a step's plain acks (their entries are in `hosts`)."""

    hosts: int = 0
    acks: int = 0
    slowest: list[list[Any]] = []  # [took_ns, host], slowest first


class LinkChange(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A host's link conditions changed at a step's release, before any participant entered
    (controller/engine/conditions.py): the directions it changed ("from->to"), the window it
    took effect in on the host's clock (`began_ns` just before it was submitted, `applied_ns`
    just after it returned), its instant on the global timeline (`at_ns`: the window's
    midpoint, +- `bound_ns`: the clock's bound plus half the window; None without a clock
    estimate), and the backend of each part of each peer's condition."""

    pairs: list[str] = []
    began_ns: int | None = None
    applied_ns: int | None = None
    at_ns: int | None = None
    bound_ns: int | None = None
    placements: dict[str, Backends] = {}


class Step(msgspec.Struct):
    """One step as it ran: its release as planned and measured (controller/engine/release.py),
    and the link conditions its release changed, by host."""

    phase: str
    status: str  # running, ok, failed
    entered_ns: int | None = None
    hosts: dict[str, StepHost] = {}
    sent_ns: int | None = None  # a summarized step's: one instant for the first level
    left_ns: int | None = None
    duration_s: float | None = None
    release: Release = msgspec.field(default_factory=Release)
    summarized: Summarized | None = None
    links: dict[str, LinkChange] = {}

    def participants(self) -> list[tuple[str, str, Entry]]:
        """Every (host, component, entry) of the step: those that acked and those that did
        not alike (a participant killed before its ack has no `entered_ns`)."""
        return [(host, name, entry) for host, part in self.hosts.items()
                for name, entry in part.components.items()]


class CutShort(msgspec.Struct, omit_defaults=True):
    """A journal's last entry, cut short by a kill: what it held is not in the record."""

    file: str
    bytes: int
    line: int | None = None  # run.journal's
    frame: int | None = None  # run.acks's
    step: int | None = None  # the step a frame cut short begins with, when that much was written
