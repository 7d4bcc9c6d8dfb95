"""A step's release and its skew.

By message (the default) each host starts the phase when the step's message reaches it. With
`release: at` the controller sends the step `lead` ahead with an instant on the reference
clock, and each daemon starts at that instant by its own clock estimate (daemon/release.py).

Either way each ack carries the daemon's clock estimate at the moment the phase began
(`entry_clock`), so every participant's start is put on the global timeline with a bound,
and the step's release skew is the spread of those starts: max - min, give or take the
bounds of the two hosts at its ends.
"""

from __future__ import annotations

import time
from typing import Any

from netspec.protocol.acksummary import AckSummary

from .model import Step

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


def skew(step: dict[str, Any], folded: AckSummary | None = None) -> dict[str, Any]:
    """The release skew of a finished step's record and the acks a fan-out tree folded
    for it: the spread of its participants' starts on the global timeline (`skew_ns`, by
    the estimates; `at_most_ns`, the widest it can be within their bounds), the
    participants at its ends, and every start that missed its instant, could not be
    placed, had no clock estimate for the instant or was refused real-time priority for
    its wake-up."""
    starts = folded if folded is not None else AckSummary()
    for host, entry in step.get("hosts", {}).items():
        for name, info in entry.get("components", {}).items():
            if "entered_ns" in info:  # else skipped, or never acked
                starts.add_start(f"{host}/{name}", info)
    said: dict[str, Any] = {"mode": step.get("release", {}).get("mode", "message"), "starts": starts.starts}
    if starts.unplaced:
        said["unplaced"] = starts.unplaced  # acks without a clock estimate
    if starts.missed:
        said["missed_ns"] = starts.missed
    said.update({flag: hosts for flag, hosts in starts.flagged.items() if hosts})
    if starts.starts >= 2 and starts.first is not None and starts.last is not None:
        said.update(skew_ns=starts.last[0] - starts.first[0], first=starts.first[1], last=starts.last[1],
                    at_most_ns=starts.high - starts.low)  # type: ignore[operator]
    return said


def skew_text(said: dict[str, Any]) -> str:
    """The release skew in a few words, and what went wrong with the release, for the live line."""
    skew = (f"{said['mode']} release skew {_spread(said['skew_ns'])} (at most {_spread(said['at_most_ns'])})"
            if "skew_ns" in said else "")
    return "; ".join(part for part in (skew, troubles(said)) if part)


def troubles(said: dict[str, Any]) -> str:
    """What went wrong with a step's release, in a few words; empty if nothing did."""
    parts = []
    if said.get("missed_ns"):
        parts.append(f"{len(said['missed_ns'])} participant(s) got the step after its instant "
                     f"(latest by {max(said['missed_ns'].values()) / 1e6:.1f} ms)")
    if said.get("unplaced") and said["mode"] == "at":  # by message, unplaced is only unknown
        parts.append(f"{len(said['unplaced'])} start(s) without a clock estimate")
    if said.get("unsynchronised"):
        parts.append(f"{len(said['unsynchronised'])} took the instant on their own clock (no estimate)")
    if said.get("realtime_refused"):
        parts.append(f"{len(said['realtime_refused'])} woke without real-time priority (refused)")
    return "; ".join(parts)


def _spread(ns: int) -> str:
    return f"{ns / 1e3:.0f} us" if ns < 1_000_000 else f"{ns / 1e6:.1f} ms"
