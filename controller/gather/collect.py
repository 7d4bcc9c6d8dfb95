"""`ns_control collect RUN`: gather what a run whose controller was killed left on its hosts.

The daemons of such a run reset it when their controller went (a local daemon watches its
parent, an SSH daemon its channel), which ends its processes but keeps its files. Each host
is reached again without a daemon, as a lost daemon's host is at collect (salvage.py). An
`address:` host is reached only through its daemon: the one there now is asked what its start
ended of what the run left, should the run's daemon have died there (daemon/leftovers.py).
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import msgspec
from netspec.protocol import messages as m
from netspec.protocol.auth import load_or_create_key
from netspec.protocol.errors import NetspecError
from netspec.protocol.runrecord import RunRecord, RunStatus, read_run

from ..experiment.model import Host as HostSpec
from ..hosts.engines import CLOSE_S
from ..hosts.fleet import DaemonClient, local_daemon_root
from ..hosts.remote import SSHHost
from ..hosts.runfiles import RunFiles, local_run_files
from ..record.rundir import RunDir, note_collected, settle
from .salvage import Salvaged, salvage_hosts

COLLECT_DEADLINE_S = 300.0
LEFT_S = 10.0  # an `address:` host's daemon asked what it ended of the run: it answers at once


def collect_run(path: Path, accept_new_host_keys: bool = False) -> dict[str, Salvaged]:
    """Salvage every host of the run at `path` that was reached; returns what each gave.

    Raises:
        NetspecError: the run's controller is still at it, or its run.json has no plan (the
            hosts to reach).
    """
    record = read_run(path)
    plan = record.planned(path)
    record = settle(path, record)
    if record.status == RunStatus.RUNNING:
        raise NetspecError(f"run {record.id} is still running (controller pid "
                           f"{record.controller.pid}): nothing to collect yet")
    run = RunDir(path, record)
    ssh_hosts: list[SSHHost] = []
    engines: list[Any] = []  # the run's container hosts' engines: one client each, closed after
    clusters: list[Any] = []  # its pod hosts' clusters, likewise
    sources = {}
    specs = [HostSpec(**msgspec.structs.asdict(h)) for h in plan.hosts]
    reached = [spec for spec in specs if spec.name in record.hosts]  # reached: something may be there
    unrecorded = [spec for spec in specs if spec.kubernetes and spec.name not in record.hosts]
    if unrecorded:  # a pod made after the record was last saved, found by its labels
        from ..hosts.cluster import Clusters, made_hosts

        clusters.append(Clusters())
        reached += made_hosts(unrecorded, record.id, clusters[0])
    for spec in reached:
        sources[spec.name] = _source(spec, record, accept_new_host_keys, ssh_hosts, engines, clusters)
    addressed = {spec.name: spec.address for spec in reached if spec.address}

    async def gather() -> dict[str, Salvaged]:
        deadline = asyncio.get_running_loop().time() + COLLECT_DEADLINE_S
        swept = {host: await _left(host, address, record.id, deadline) for host, address in addressed.items()}
        return await salvage_hosts(sources, run, deadline, swept)
    try:
        found = asyncio.run(gather())
    finally:
        for host in ssh_hosts:
            host.conn.close()
        for shared in engines:
            shared.close(CLOSE_S)
        for cluster in clusters:
            cluster.close()
    note_collected(run, found)
    return found


async def _left(host: str, address: str, run_id: str, deadline: float) -> list[str]:
    """What the daemon at `address` (an `address:` host) says its start ended of the run,
    which a daemon SIGKILLed there left (daemon/leftovers.py); or why it could not say."""
    loop = asyncio.get_running_loop()
    until = min(deadline, loop.time() + LEFT_S)
    addr, _, port = address.rpartition(":")
    failed: BaseException | None = None
    try:
        async with asyncio.timeout_at(until):
            client = await DaemonClient.connect(host, (addr, int(port)), load_or_create_key(), _no_events,
                                                until)
            async with asyncio.TaskGroup() as serving:
                serving.create_task(client.serve())  # its replies: ended by the close
                try:
                    told = await client.request(m.LEFT, until, run=run_id)
                finally:
                    await client.close()
    except* (NetspecError, OSError, TimeoutError) as group:
        failed = group.exceptions[0]
    if failed is not None:
        return [f"its netspecd at {address} could not be asked what the run left there "
                f"({failed or 'no answer within the deadline'}): what a daemon that died there left "
                "(link conditions, a paused process) is ended by the next netspecd started there on "
                "the same root"]
    if not told.swept:
        return [f"its netspecd at {address} found nothing of the run left behind"]
    return [f"the netspecd started at {address} after the run's (pid {told.pid}) died ended what it left: "
            f"{'; '.join(told.removed) or 'nothing was left'}"]


def _no_events(host: str, event: object) -> None:
    """A `left` request's connection carries no events that need taking."""


def _source(spec: HostSpec, record: RunRecord, accept_new: bool, opened: list[SSHHost],
            engines: list[Any], clusters: list[Any]) -> Any:
    if spec.ssh:
        host = SSHHost(spec, accept_new)
        opened.append(host)
        return functools.partial(host.run_files, record.id)
    if spec.address:
        return lambda: None
    if spec.docker or spec.kubernetes:
        from ..hosts.cluster import Clusters
        from ..hosts.docker import DockerHost  # the Docker SDK loads only for a run with docker hosts
        from ..hosts.engines import Engines
        from ..hosts.pods import PodHost

        if not engines:
            engines.append(Engines())
        if spec.kubernetes and not clusters:
            clusters.append(Clusters())
        host = (PodHost(spec, record.id, engines[0], clusters[0]) if spec.kubernetes else
                DockerHost(spec, record.id, engines[0]))
        return functools.partial(host.run_files, record.id)
    return functools.partial(_local_files, record, spec.name)


def _local_files(record: RunRecord, host: str) -> RunFiles:
    """A local host's run directory, under the daemon root its controller gave it."""
    root = local_daemon_root(record.controller.pid, host)
    return local_run_files(root, record.id, host)
