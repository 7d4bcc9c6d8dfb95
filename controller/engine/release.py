"""A step's release and its skew.

By message (the default) each host starts the phase when the step's message reaches it. With
`release: at` the controller sends the step `lead` ahead with an instant on the reference
clock, and each daemon starts at that instant by its own clock estimate (daemon/release.py).

Either way each ack carries the daemon's clock estimate at the moment the phase began
(`entry_clock`), so every participant's start is put on the global timeline with a bound,
and the step's release skew is the spread of those starts: max - min, give or take the
bounds of the two hosts at its ends. It is measured twice: where each program began its
callback (the `started` nodelib stamps in its ack: where the participants start, what a
user's experiment sees) and where each daemon began the phase (what the release itself
achieved; the programs start later, each after its daemon handed it the step).
"""

from __future__ import annotations

import time

import msgspec
from netspec.protocol.acksummary import AckSummary
from netspec.protocol.runrecord import Release, Spread
from netspec.protocol.runrecord import Step as StepRecord

from ..experiment.model import Step

LEAD_S = 0.05
# The controller sends one enter per host before the instant, and on a machine shared by
# many daemons each reads it only once the cores are free of the step before (bench/scale.py:
# at 0.2 ms per host, 3 % of 100 hosts and 69 % of 1000 got the step after its instant).
LEAD_PER_HOST_S = 0.0015


def lead_s(step: Step, hosts: int) -> float:
    """How far ahead of its instant a `release: at` step is sent."""
    return step.lead_s if step.lead_s is not None else LEAD_S + LEAD_PER_HOST_S * hosts


def instant_ns(lead: float, controller_offset_ns: int) -> int:
    """The instant on the reference clock `lead` seconds from now; `controller_offset_ns`
    is this controller's clock minus the reference's."""
    return time.time_ns() - controller_offset_ns + round(lead * 1e9)


def planned(lead: float, controller_offset_ns: int) -> Release:
    """A `release: at` step's release as its record keeps it: the instant on the reference
    clock `lead` seconds from now, the lead, and the instant on this controller's clock
    (where each host's time in the step begins)."""
    instant = instant_ns(lead, controller_offset_ns)
    return Release(mode="at", instant_ns=instant, lead_s=lead,
                   instant_controller_ns=instant + controller_offset_ns)


def began_ns(step: StepRecord, sent_ns: int) -> int:
    """When a host's part in a step began, on the controller's clock, from its step record:
    when the step was sent to it, or with `release: at` the instant (the lead is nobody's
    time: a host's time in the step counts from the release)."""
    instant = step.release.instant_controller_ns
    return max(sent_ns, instant if instant is not None else sent_ns)


def skew(step: StepRecord, folded: AckSummary | None = None) -> Release:
    """The step's release (as planned) with its skew, from a finished step's record and the
    acks a fan-out tree folded for it: where the programs began their callbacks (`program`:
    their spread on the global timeline, `skew_ns` by the estimates and `at_most_ns` the
    widest it can be within their bounds, the participants at its ends, how many `starts`)
    and where the daemons began the phase (the same at the top level); and every start that
    missed its instant, could not be placed, had no clock estimate for the instant or was
    refused real-time priority for its wake-up."""
    starts = folded if folded is not None else AckSummary()
    for host, name, info in step.participants():
        if info.entered_ns is not None:  # else skipped, or never acked
            starts.add_start(f"{host}/{name}", msgspec.to_builtins(info))
    programs = starts.programs.said()
    plan = step.release
    return Release(mode=plan.mode, instant_ns=plan.instant_ns, lead_s=plan.lead_s,
                   instant_controller_ns=plan.instant_controller_ns, starts=starts.daemons.count,
                   unplaced=starts.unplaced, missed_ns=starts.missed, **starts.flagged,
                   **starts.daemons.said(),
                   program=Spread(starts=starts.programs.count, **programs) if programs else None)


def skew_text(said: Release) -> str:
    """The release skew in a few words, and what went wrong with the release, for the live line:
    the programs' (where the participants start), beside the daemons'."""
    program = said.program
    parts = [f"{_spread(program.skew_ns)} at the programs (at most {_spread(program.at_most_ns or 0)})"] \
        if program is not None and program.skew_ns is not None else []
    if said.skew_ns is not None:
        parts.append(f"{_spread(said.skew_ns)} at the daemons (at most {_spread(said.at_most_ns or 0)})")
    skew = f"{said.mode} release skew {', '.join(parts)}" if parts else ""
    return "; ".join(part for part in (skew, *said.troubles()) if part)


def _spread(ns: int) -> str:
    if ns < 1_000:
        return f"{ns} ns"
    return f"{ns / 1e3:.0f} us" if ns < 1_000_000 else f"{ns / 1e6:.1f} ms"
