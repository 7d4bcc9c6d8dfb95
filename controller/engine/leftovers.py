"""What netspec made in a run's Docker engines and nobody removed, found by its labels
(controller/hosts/leftovers.py) and removed, each said live and in run.json:

- before a run reaches its hosts, what runs whose controller died left in the same engines:
  collected into the run's directory where it is under this run's root (as `ns_control
  collect RUN` would: the containers' files copied out, then the containers removed), what
  is left then removed; a run of another root is only said (its own collect may be on its
  way);
- at a run's end, what of its own is still there after its hosts were stopped.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from netspec.protocol.errors import NetspecError
from netspec.protocol.names import safe_name

from ..hosts.engines import Engines
from ..hosts.fleet import Host
from ..hosts.leftovers import dead_runs, remove_run


def _engines_of(hosts: dict[str, Host]) -> dict[str, tuple[str | None, dict[str, str] | None]]:
    """Each engine of the run's container hosts, by how it is said: (engine, tls)."""
    found = {}
    for host in hosts.values():
        docker = host.spec.docker
        if docker is not None:
            found.setdefault(f"engine {docker.engine}" if docker.engine else "the local engine",
                             (docker.engine, docker.tls))
    return found


async def sweep_dead_runs(hosts: dict[str, Host], engines: Engines, run_id: str, root: Path) -> list[str]:
    """What runs whose controller died left in the engines of `hosts`: those whose directory
    is under the runs root `root` (ROOT/EXPERIMENT/RUN) collected into it, then removed; the
    others said. Returns a sentence per run."""
    import docker.errors

    from ..gather.collect import collect_run  # paramiko with it: only once there is a run to collect

    said = []
    for where, (engine, tls) in _engines_of(hosts).items():
        try:
            client = await engines.call(engines.client, engine, tls)
            dead = await engines.call(dead_runs, client, run_id)
        except (NetspecError, docker.errors.DockerException) as exc:  # its hosts' start says it again
            said.append(f"{where}: not looked at for what runs whose controller died left there: {exc}")
            continue
        for run, names in dead.items():
            left = f"run {run}, whose controller is gone, left {', '.join(sorted(names))} in {where}"
            try:  # the label is the engine's word: a path only once it is a name
                found = list(root.glob(f"*/{safe_name(run, 'run id')}/run.json"))
            except NetspecError as exc:
                said.append(f"{left}: left there ({exc})")
                continue
            if len(found) != 1:
                # Another root's run (another project's, another suite's): its own `collect` may
                # be on its way, so it is said and left.
                said.append(f"{left}: left there, its run directory not under {root} (`ns_control collect "
                            f"{run}` where it is gathers its files and removes them)")
                continue
            path = found[0].parent
            try:
                gathered = await asyncio.to_thread(collect_run, path)
                copied = sum(s.copied for s in gathered.values())
                left += f": collected into {path} ({copied} files copied, as `ns_control collect` does)"
            except NetspecError as exc:
                left += f": not collected ({exc})"
            removed = await engines.call(remove_run, client, run)
            left += f"; removed {', '.join(removed)}" if removed else "; the collect removed them"
            said.append(left)
    return said


async def sweep_own(hosts: dict[str, Host], engines: Engines, run_id: str) -> list[str]:
    """What of run `run_id` netspec made and did not keep that is still in its engines after
    its hosts were stopped, removed. Returns what was, a sentence per engine."""
    import docker.errors

    said = []
    for where, (engine, tls) in _engines_of(hosts).items():
        try:
            client: Any = await engines.call(engines.client, engine, tls)
            removed = await engines.call(remove_run, client, run_id)
        except (NetspecError, docker.errors.DockerException) as exc:
            said.append(f"{where}: what the run left there was not looked for: {exc}")
            continue
        if removed:
            said.append(f"{where}: {', '.join(removed)} of the run left after its hosts stopped: removed")
    return said
