"""A participant's outcome in a step: the words run.json's entries say it in (`Entry.outcome`),
which `show`, `report`, the browser and `netspec.results` all read through this module; the
one rule that decides an entry's outcome (`decide`) and the one order, worst first (`worst`).
A run's own status words are `RunStatus` (protocol/runrecord.py)."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Protocol


class Outcome(StrEnum):
    """What became of a participant in a step. A str enum: a member is its word, so run.json's
    bytes are as they were, and an entry's word compares equal to its member."""

    OK = "ok"
    WARNING = "warning"  # acked ok with a warning
    ERROR = "error"  # its ack said it failed
    KILLED = "killed"  # no ack within its step's deadline: ended there
    LATE = "late"  # acked after its k-of-n barrier opened without it
    WAITING = "waiting"  # a host sent the step, none of whose participants acked it
    # ended by a fault of the schedule: what the file asked, not a failure (exits.KILLED, the
    # verdict of its end)
    SCHEDULED = "killed by schedule"
    RUNNING = "running"  # no ack yet
    ENDED = "ended"  # still in the step when the run failed, ended with it
    SKIPPED = "skipped"  # out of the run since an earlier step (said there)


WORST_FIRST = (Outcome.ERROR, Outcome.KILLED, Outcome.LATE, Outcome.WAITING, Outcome.WARNING,
               Outcome.SCHEDULED, Outcome.RUNNING, Outcome.ENDED, Outcome.SKIPPED, Outcome.OK)
# What the triage lists of a step: a participant that failed, or a host sent a failed step that
# none of its participants acked (`waiting`, as `ns_control show` says it).
FAILING = frozenset({Outcome.ERROR, Outcome.KILLED, Outcome.LATE, Outcome.WAITING})
# A participant that did what the file asked: its `n/N ok`.
FINE = frozenset({Outcome.OK, Outcome.WARNING, Outcome.SCHEDULED})
# Those that never acked in time: triaged by the deadline they missed and their last sign of life.
HUNG = frozenset({Outcome.KILLED, Outcome.LATE, Outcome.WAITING})


class Acked(Protocol):
    """What `decide` reads of a step's entry (protocol/runstep.py's Entry)."""

    status: str
    outcome: str | None
    entered_ns: int | None
    acked_ns: int | None


def decide(entry: Acked, deadline_ns: int | None = None) -> Outcome:
    """A participant's outcome in its step, from its entry: the one the controller recorded,
    else its ack's status (running while it has not acked); ok with a warning is `warning`,
    and an error acked at or past its step's deadline (`deadline_ns`) was killed there."""
    acked = entry.acked_ns is not None
    said = (Outcome(entry.outcome) if entry.outcome else
            Outcome(entry.status or Outcome.OK) if acked else Outcome.RUNNING)
    if said == Outcome.OK and entry.status == Outcome.WARNING:
        return Outcome.WARNING
    if (said == Outcome.ERROR and deadline_ns is not None and acked and entry.entered_ns is not None
            and entry.acked_ns - entry.entered_ns >= deadline_ns):
        return Outcome.KILLED
    return said


def worst(outcomes: Iterable[str]) -> Outcome | None:
    """The worst of `outcomes` (WORST_FIRST), None for none."""
    return min((Outcome(o) for o in outcomes), key=WORST_FIRST.index, default=None)
