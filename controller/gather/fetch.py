"""Gather a host's files (outputs, exit status, handed-back files, streams) into the run
directory."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Set
from pathlib import Path

from netspec.protocol import messages as m
from netspec.protocol.errors import ConnectionLost, ProtocolError, raise_if_any_failed

from ..hosts.fleet import DaemonClient, Host
from ..record.progress import Progress, ProgressSink
from ..record.results import ComponentResult
from ..record.rundir import RunDir
from .salvage import salvage_hosts

CHUNK = m.READ_LIMIT  # each read asks for the most a daemon answers with
STREAMED = ("stdout", "stderr")


async def fetch_host(client: DaemonClient, run: RunDir, deadline: float,
                     components: set[str]) -> list[tuple[str, Path]]:
    """Copy every collectable file of the run on `client`'s host (`components`: those it
    runs; a listing that names another is refused before anything is written).

    Returns:
        (component, path written) for each file.

    Raises:
        DeadlineExceeded, ConnectionLost, RemoteError, ProtocolError: from the daemon requests.
    """
    listing = await client.request(m.FILES, deadline, during="collect")
    foreign = sorted({e.component for e in listing.files} - {None, *components})
    if foreign:
        raise ProtocolError(f"its files name components {foreign[:5]}, which it does not run",
                            f"host {client.host}")
    written = []
    for entry in listing.files:
        target = run.gathered(client.host, entry.component, entry.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        if entry.name in STREAMED and target.is_file() and target.stat().st_size == entry.size:
            written.append((entry.component, target))  # it all arrived as it was written
            continue
        if entry.missing:
            target.with_name(target.name + ".missing").write_text(
                f"handed back but not found, or not a regular file, on host {client.host}: "
                f"{entry.path}\n")
            continue
        partial = target.with_name(target.name + ".part")
        with open(partial, "wb") as f:
            offset = 0
            while True:
                part = await client.request(m.READ, deadline, during="collect",
                                            path=entry.path, offset=offset, size=CHUNK)
                f.write(part.data)
                offset += len(part.data)
                if part.eof:
                    break
        partial.replace(target)
        written.append((entry.component, target))
    return written


async def fetch_fleet(clients: dict[str, DaemonClient], hosts: dict[str, Host], run: RunDir,
                      results: dict[str, ComponentResult], progress: ProgressSink, deadline: float,
                      fetched: Callable[[], None], left: Set[str] = frozenset()) -> None:
    """Gather every connected host's files, and salvage those of a host whose daemon was
    lost, or `left` the run (the schedule killed it: salvaged, not a failure); `fetched()`
    once every host was asked. Each component's files go to its result, each host's
    streams to run.json.

    Raises:
        StepFailed: a host's files could not all be gathered (after the others were).
    """
    names, done = [h for h in clients if h not in left], []
    runs: dict[str, set[str]] = {}  # host -> its components, gathered once for the fleet
    for name, result in results.items():
        runs.setdefault(result.host, set()).add(name)

    async def fetch(host: str) -> list[tuple[str, Path]]:
        try:
            return await fetch_host(clients[host], run, deadline, runs.get(host, set()))
        finally:
            done.append(host)
            progress(Progress("count", "collect", host, done=len(done), total=len(names)))
    outcome = await asyncio.gather(*(fetch(h) for h in names), return_exceptions=True)
    fetched()
    lost = {h: functools.partial(hosts[h].run_files, run.id)
            for h, files in zip(names, outcome, strict=True) if isinstance(files, ConnectionLost)}
    lost.update({h: functools.partial(hosts[h].run_files, run.id) for h in left})
    salvaged = await salvage_hosts(lost, run, deadline)
    for host, found in salvaged.items():
        progress(Progress("salvaged", host=host, text=found.summary()))
    for host, files in [*zip(names, outcome, strict=True), *((h, f.files) for h, f in salvaged.items())]:
        if isinstance(files, BaseException):
            continue
        for component, path in files:
            if component is None:
                run.record.hosts[host].streams.append(str(path.relative_to(run.path)))
            else:
                results[component].files.append(path)
    raise_if_any_failed("collect", dict(zip(names, outcome, strict=True)))
