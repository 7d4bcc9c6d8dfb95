"""What the engine tells the user while a run goes (summary.LiveLine words it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """One thing worth telling the user while the run goes (see summary.LiveLine)."""

    # "step" (begins), "host" (finished the step), "hosts" (`done` hosts finished it ok,
    # summarized by a fan-out tree), "step_done", "outcome" (a straggler),
    # "salvaged" (a lost daemon's host, gathered without it), "notice" (a setting the run
    # changed, said once), "count" (`done` of `total` hosts reached or gathered)
    kind: str
    step: str = ""
    host: str = ""
    status: str = ""
    seconds: float = 0.0
    text: str = ""
    done: int = 0
    total: int = 0
    slowest: tuple[tuple[float, str], ...] = ()  # "hosts": the slowest of `done` hosts


ProgressSink = Callable[[Progress], None]
