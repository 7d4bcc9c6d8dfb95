"""A run's first failure, and the waits it cuts short: each wait in a task group of its own
under an absolute deadline, ended when the run fails first."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from netspec.protocol.errors import NetspecError


class Failure:
    """What stopped a run, once: set by whoever meets it first (an event, a signal, a
    cancellation), raised by each guarded wait. Lifecycle: `open()` in the run's loop
    before the run's first wait; `set` any number of times after (the first one counts)."""

    future: asyncio.Future[None]

    def open(self) -> None:
        self.future = asyncio.get_running_loop().create_future()

    def set(self, exc: NetspecError) -> None:
        if not self.future.done():
            self.future.set_exception(exc)

    def done(self) -> bool:
        return self.future.done()

    def exception(self) -> BaseException | None:
        """What stopped the run, None if nothing did (yet)."""
        return self.future.exception() if self.future.done() else None


async def guard(failure: Failure, work: Coroutine[Any, Any, Any], deadline: float,
                on_timeout: Callable[[], NetspecError]) -> Any:
    """Run `work` in a task group of its own under `deadline` (loop time), unless the run
    fails first: its result. The work's task is ended and awaited on every way out, so
    nothing it started outlives the wait; a cancellation of this wait goes on to the
    caller once it is.

    Raises:
        NetspecError: the run's failure, if it came first (or by the deadline); what
            `on_timeout` makes, if the deadline passed; what `work` raised.
    """
    error: BaseException | None = None
    try:
        async with asyncio.timeout_at(deadline), asyncio.TaskGroup() as tg:
            task = tg.create_task(work)
            tg.create_task(_until_failed(failure.future, task))
        return task.result()
    except TimeoutError:
        if failure.done():
            failure.future.result()  # the failure is the news, not the deadline it cut short
        raise on_timeout() from None
    except BaseExceptionGroup as group:  # one of the two raised, and the other was cancelled
        error = group.exceptions[0]
    raise error


async def _until_failed(failure: asyncio.Future[None], work: asyncio.Task[Any]) -> None:
    """Raise the run's failure if it comes before `work` ends (which then is cancelled)."""
    await asyncio.wait({work, failure}, return_when=asyncio.FIRST_COMPLETED)
    if not work.done():
        failure.result()
