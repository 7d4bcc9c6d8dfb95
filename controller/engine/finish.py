"""A run's end, however it ends: the stragglers waited for or ended, every host reset, what
was not gathered yet fetched (after a failure), the connections closed and the daemons
stopped, and the run's outcome decided and written."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from netspec.protocol import messages as m
from netspec.protocol.errors import NetspecError, without_names
from netspec.protocol.exits import describe_returncode, kill_run_processes
from netspec.protocol.runoutcome import RunOutcome

from ..hosts.engines import CLOSE_S
from ..hosts.fleet import DaemonClient, Host, LocalHost
from ..hosts.forks import DaemonForks
from ..record.progress import Progress, ProgressSink
from ..record.results import ComponentResult
from ..record.rundir import RunDir
from ..record.saving import Saves
from .guard import Failure
from .leftovers import sweep_own
from .reach import Fleet
from .step import Steps
from .stragglers import Stragglers

CLEANUP_DEADLINE_S = 30.0


async def end_component(clients: Mapping[str, DaemonClient], host: str, name: str) -> str | None:
    """End component `name` on `host` now (a straggler at its step's deadline); None if
    it was, else why not."""
    if host not in clients:
        return f"host {host} is not connected"
    try:
        await clients[host].request(m.END, asyncio.get_running_loop().time() + CLEANUP_DEADLINE_S,
                                    component=name)
    except NetspecError as exc:
        return str(exc)
    return None


async def best_effort(clients: Mapping[str, DaemonClient], what: Callable[[DaemonClient], Awaitable[Any]],
                      seconds: float) -> None:
    """Do `what` on every connected host; give up quietly after `seconds`."""
    async def one(client: DaemonClient) -> None:
        with contextlib.suppress(NetspecError, OSError):
            await what(client)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await asyncio.gather(*(one(c) for c in clients.values()))


async def stop_hosts(hosts: Mapping[str, Host], run_id: str, seconds: float,
                     progress: ProgressSink) -> list[str]:
    """Stop every host's daemon, all within `seconds` (a best effort: then the stops still
    under way are cancelled). What went wrong stopping a host, and each host not stopped by
    then, is said (a sentence naming the host each): live, and returned for run.json."""
    stopped: dict[str, list[str]] = {}

    async def one(host: Host) -> None:
        try:
            stopped[host.name] = await host.stop(run_id)
        except (NetspecError, OSError) as exc:  # said; the other hosts are stopped all the same
            stopped[host.name] = [f"stopping it failed: {exc}"]
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds), asyncio.TaskGroup() as tg:
            for host in hosts.values():
                tg.create_task(one(host))
    said = [f"host {name}: {text}" for name in hosts
            for text in stopped.get(name, [f"not stopped within {seconds:g} s at the run's end"])]
    for text in said:
        progress(Progress("notice", text=text))
    return said


def unclean_ends(results: Mapping[str, ComponentResult],
                 ended: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """Each component that did not end cleanly (an exit status neither 0 nor the
    SIGTERM netspec sent it), which nothing has said yet: one netspec ended mid-run
    (in `ended`) is a trouble already. A component its daemon killed because it would
    not end when asked is one of them: a run is ok only if every component ended cleanly.
    Each is (host, what it says but for the host's names, what it says), for `said_once`."""
    said = []
    for name, result in results.items():
        if result.exit_status is None or result.ok or name in ended:
            continue
        forced = " (it did not end when asked, so netspec killed it)" if result.forced else ""
        text = f"host {result.host}: {name}: {describe_returncode(result.exit_status)} at its end{forced}"
        said.append((result.host, without_names(text, [result.host, name]), text))
    return said


async def finish(error: Exception | None, phase: str, *, fleet: Fleet, forks: DaemonForks,
                 steps: Steps, stragglers: Stragglers, saves: Saves, failure: Failure,
                 results: Mapping[str, ComponentResult], rundir: RunDir) -> None:
    """End the run that `error` stopped (None: it went through; a NetspecError, or a fault of
    the controller's own) in `phase`: cleaned up and gathered however it ended, each wait
    bounded; its outcome written to run.json last."""
    loop = asyncio.get_running_loop()
    await stragglers.run_ended(CLEANUP_DEADLINE_S)
    if error is not None:
        await best_effort(fleet.clients, lambda c: c.request(m.RESET, loop.time() + 15, clean=False), 20)
        if not steps.collected:
            # Every request of the collect honours this deadline: a best effort.
            with contextlib.suppress(NetspecError):
                await steps.collect(loop.time() + CLEANUP_DEADLINE_S)
    await best_effort(fleet.clients, lambda c: c.request(m.RESET, loop.time() + 15, clean=True), 20)
    for client in fleet.clients.values():
        await client.close()
    stops = await stop_hosts(fleet.hosts, rundir.id, CLEANUP_DEADLINE_S, stragglers.progress)
    if fleet.engines is not None:  # the container hosts' pool, its calls under way waited for
        for text in await sweep_own(fleet.hosts, fleet.engines, fleet.clusters, rundir.id):
            stragglers.progress(Progress("notice", text=text))
            stops.append(text)
        for text in await asyncio.to_thread(fleet.engines.close, CLOSE_S):
            stragglers.progress(Progress("notice", text=text))
            stops.append(text)
    if fleet.clusters is not None:  # after the engines' pool, whose calls used their clients
        fleet.clusters.close()
    if any(isinstance(h, LocalHost) for h in fleet.hosts.values()):
        # A local daemon that died hard (SIGKILL, OOM) could not reset its run; this
        # machine is its host, so what it left behind is ours to end: one scan of the
        # machine's processes for the whole fleet.
        await asyncio.to_thread(kill_run_processes, rundir.id, [], signal.SIGKILL)
    await forks.close()
    failure.exception()  # retrieved, said or not: never "exception was never retrieved"
    saves.cancel()
    unclean = unclean_ends(results, stragglers.ended) if error is None else []
    rundir.finish(RunOutcome.ended(error, phase, stragglers.troubles, unclean, stops))
