"""When run.json is saved while a run goes: soon after a change that matters, but not
twice within SAVE_INTERVAL_S, and once a second while a step lasts, so that a schedule of
many short steps does not rewrite a growing file twice per step (each step's record goes
to the journal instead: rundir.journal_step)."""

from __future__ import annotations

import asyncio
import time

from netspec.protocol.runrecord import Step

from .rundir import RunDir

SAVE_INTERVAL_S = 0.2
LIVE_SAVE_S = 1.0


class Saves:
    """The saves of one run's run.json. Lifecycle: `soon()` as often as the run likes;
    `during(record)` as a step starts and `step_ended()` as it ends, in a `finally` (a
    step's live saves have one timer, held here, that nothing else ends); `cancel()`
    once, before the run's last save (rundir.finish), ends every timer."""

    def __init__(self, rundir: RunDir):
        self.rundir = rundir
        self._saved_at = self._cost = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._live: asyncio.TimerHandle | None = None  # the step's every LIVE_SAVE_S

    def soon(self) -> None:
        """Save now, or soon if it was saved moments ago. The interval grows with the cost
        of a save so that saving takes at most a tenth of the controller's time."""
        if self._timer is not None:
            return
        wait = self._saved_at + max(SAVE_INTERVAL_S, 10 * self._cost) - time.monotonic()
        if wait <= 0:
            self._save()
        else:
            self._timer = asyncio.get_running_loop().call_later(wait, self._save)

    def during(self, record: Step) -> None:
        """Save every LIVE_SAVE_S (or as `soon` allows) while step `record` runs, from
        LIVE_SAVE_S on (until `step_ended`)."""
        self.step_ended()
        self._live = asyncio.get_running_loop().call_later(LIVE_SAVE_S, self._live_save, record)

    def _live_save(self, record: Step) -> None:
        self.soon()
        self._live = asyncio.get_running_loop().call_later(LIVE_SAVE_S, self._live_save, record)

    def step_ended(self) -> None:
        if self._live is not None:
            self._live.cancel()
            self._live = None

    def cancel(self) -> None:
        self.step_ended()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _save(self) -> None:
        self._timer = None
        self._saved_at = time.monotonic()
        self.rundir.save()
        self._cost = time.monotonic() - self._saved_at
