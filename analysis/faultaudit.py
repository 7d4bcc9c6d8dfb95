"""A fault of the schedule in words, and its end, from run.json's records alone
(protocol/runrecord.py's FaultRecord): the controller says each live as its host reports it,
`report` prints them, the browser and faults.parquet (analysis/faults.py) take them. No
table library here: a run that does not merge never loads one.

A fault's end is its own where it has one (a timed partition's or pause's, a pressure's, a
restart's start again), else the fault that undoes it, the first of its kind done after it
on the same host and target: a partition's heal, a pause's resume, a kill's or terminate's
start or restart. A partition's, each of its directions' (a heal of that direction), is the
last of theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

from netspec.protocol.kinds import LINK_FAULTS
from netspec.protocol.runrecord import FaultRecord, RunRecord

UNDONE_BY = {"partition": ("heal",), "pause": ("resume",), "kill": ("start", "restart"),
             "terminate": ("start", "restart")}
UNDOING = ("heal", "resume", "start")  # each an instant that ends an earlier fault: no end of its own


@dataclass(frozen=True)
class FaultEnd:
    """When a fault ended, and by which fault of the schedule (None: its own end)."""

    at_ns: int
    by: int | None


def fault_end(faults: list[FaultRecord], fault: FaultRecord) -> FaultEnd | None:
    """`fault`'s end (the module's doc says which); None if it has none (a kill nothing
    started again, a partition never healed: to the run's end). A partition's is its last
    direction's: each ends by its own `for`, or by the first heal of that direction after it."""
    if fault.ended_ns is not None:
        return FaultEnd(fault.ended_ns, None)
    ends = [direction_end(faults, fault, d) for d in fault.directions()]
    if not ends or None in ends:
        return None
    return max((e for e in ends if e is not None), key=lambda e: e.at_ns)


def direction_end(faults: list[FaultRecord], fault: FaultRecord,
                  direction: tuple[str, str]) -> FaultEnd | None:
    """When `fault` ended on one of its directions ((host, target)): its own end there, or
    the first fault undoing it that was done there after it; None if none did."""
    done, ended = direction_instants(fault, direction)
    if ended is not None:
        return FaultEnd(ended, None)
    undo = UNDONE_BY.get(fault.kind)
    if undo is None or done is None:
        return None
    after = [(at, f.index) for f in faults if f.kind in undo and not f.error and direction in f.directions()
             for at in [direction_instants(f, direction)[0]] if at is not None and at >= done]
    return FaultEnd(*min(after)) if after else None


def direction_instants(fault: FaultRecord, direction: tuple[str, str]) -> tuple[int | None, int | None]:
    """When `fault` was done on `direction`, and its own end there."""
    part = fault.part(*direction)
    return (fault.done_ns, fault.ended_ns) if part is None else (part.done_ns, part.ended_ns)


def fault_line(said: FaultRecord) -> str:
    """A fault and its audit in a line: the live line's, and `report`'s."""
    when = f"{said.phase or 'run'}+{said.after_s:g}s"
    aim = f", role {said.role}" if said.role is not None else ""
    if said.kind in LINK_FAULTS:
        head = f"fault {said.index} {said.kind} {said.host or '?'} | {said.target or '?'} ({when}{aim})"
    else:
        head = (f"fault {said.index} {said.kind} {said.target or '?'} "
                f"(host {said.host or '?'}, at {when}{aim})")
    if said.done_ns is None:
        return f"{head}: {said.error or 'not done yet'}"
    bound = " (unsynchronised)" if said.unsynchronised else \
        f" +- {_ms(said.bound_ns)}" if said.bound_ns is not None else ""
    late = f"done {_ms(said.late_ns)} after its instant{bound}" if said.late_ns is not None else "done"
    if len(said.parts) > 1:
        late += f", its last of {len(said.parts)} directions"
    effect = f"; {said.effect}" if said.effect else ""
    after = f", {_ms(said.effect_after_ns)} after it" if said.effect_after_ns is not None else ""
    if said.ended_ns is not None and said.through_ns is not None:
        after += f"; ended, a first packet through {_ms(said.through_ns - said.ended_ns)} after"
    error = f"; {said.error}" if said.error else ""
    lasting = "; the run ended before its effect or its end was reported" if said.unfinished else ""
    return f"{head}: {late}{effect}{after}{error}{lasting}"


def fault_lines(record: RunRecord) -> list[str]:
    """`report`'s section of a run's faults: each planned fault against its observed effect."""
    if not record.faults:
        return []
    return ["faults (each instant against its effect, on its host's clock):",
            *(f"  {fault_line(said)}" for said in record.faults)]


def _ms(ns: int | None) -> str:
    if ns is None:
        return "?"
    return f"{ns / 1e3:.0f} us" if abs(ns) < 1_000_000 else f"{ns / 1e6:.1f} ms"
