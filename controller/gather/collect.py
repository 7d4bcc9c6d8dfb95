"""`ns_control collect RUN`: gather what a run whose controller was killed left on its hosts.

The daemons of such a run reset it when their controller went (a local daemon watches its
parent, an SSH daemon its channel), which ends its processes but keeps its files. Each host
is reached again without a daemon, as a lost daemon's host is at collect (salvage.py).
"""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import msgspec
from netspec.protocol.errors import NetspecError
from netspec.protocol.runrecord import RunRecord, read_run

from ..experiment.model import Host as HostSpec
from ..hosts.engines import CLOSE_S
from ..hosts.fleet import local_daemon_root
from ..hosts.remote import SSHHost
from ..hosts.runfiles import RunFiles, local_run_files
from ..record.rundir import RunDir, note_collected, settle
from .salvage import Salvaged, salvage_hosts

COLLECT_DEADLINE_S = 300.0


def collect_run(path: Path, accept_new_host_keys: bool = False) -> dict[str, Salvaged]:
    """Salvage every host of the run at `path` that was reached; returns what each gave.

    Raises:
        NetspecError: the run's controller is still at it, or its run.json has no plan (the
            hosts to reach).
    """
    record = read_run(path)
    plan = record.planned(path)
    record = settle(path, record)
    if record.status == "running":
        raise NetspecError(f"run {record.id} is still running (controller pid "
                           f"{record.controller.pid}): nothing to collect yet")
    run = RunDir(path, record)
    ssh_hosts: list[SSHHost] = []
    engines: list[Any] = []  # the run's container hosts' engines: one client each, closed after
    sources = {}
    for spec in (HostSpec(**msgspec.structs.asdict(h)) for h in plan.hosts):
        if spec.name in record.hosts:  # reached by the run: something may be there
            sources[spec.name] = _source(spec, record, accept_new_host_keys, ssh_hosts, engines)

    async def gather() -> dict[str, Salvaged]:
        return await salvage_hosts(sources, run, asyncio.get_running_loop().time() + COLLECT_DEADLINE_S)
    try:
        found = asyncio.run(gather())
    finally:
        for host in ssh_hosts:
            host.conn.close()
        for shared in engines:
            shared.close(CLOSE_S)
    note_collected(run, found)
    return found


def _source(spec: HostSpec, record: RunRecord, accept_new: bool, opened: list[SSHHost],
            engines: list[Any]) -> Any:
    if spec.ssh:
        host = SSHHost(spec, accept_new)
        opened.append(host)
        return functools.partial(host.run_files, record.id)
    if spec.address:
        return lambda: None
    if spec.docker:
        from ..hosts.docker import DockerHost  # the Docker SDK loads only for a run with docker hosts
        from ..hosts.engines import Engines

        if not engines:
            engines.append(Engines())
        return functools.partial(DockerHost(spec, record.id, engines[0]).run_files, record.id)
    return functools.partial(_local_files, record, spec.name)


def _local_files(record: RunRecord, host: str) -> RunFiles:
    """A local host's run directory, under the daemon root its controller gave it."""
    root = local_daemon_root(record.controller.pid, host)
    return local_run_files(root, record.id, host)
