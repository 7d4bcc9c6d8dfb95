"""What netspec made in a run's Docker engines and Kubernetes clusters and nobody removed,
found by its labels (controller/hosts/leftovers.py, pods.py) and removed, each said live and
in run.json:

- before a run reaches its hosts, what runs whose controller died left in the same engines:
  collected into the run's directory where it is under this run's root (as `ns_control
  collect RUN` would: the containers' files copied out, then the containers removed), what
  is left then removed; a run of another root is only said (its own collect may be on its
  way);
- at a run's end, what of its own is still there after its hosts were stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netspec.protocol.errors import NetspecError
from netspec.protocol.names import safe_name

from ..hosts.engines import Engines
from ..hosts.fleet import Host

if TYPE_CHECKING:
    from ..hosts.cluster import Clusters


def _engines_of(hosts: dict[str, Host]) -> dict[str, tuple[str | None, dict[str, str] | None]]:
    """Each engine of the run's container hosts, by how it is said: (engine, tls)."""
    found = {}
    for host in hosts.values():
        docker = host.spec.docker
        if docker is not None:
            found.setdefault(f"engine {docker.engine}" if docker.engine else "the local engine",
                             (docker.engine, docker.tls))
    return found


@dataclass(frozen=True)
class Place:
    """An engine or a cluster of the run's hosts, as leftovers are looked for there: each call
    blocking, made in the fleet's pool."""

    where: str
    dead: Callable[[str], dict[str, list[str]]]  # the current run's id -> dead runs' leftovers
    remove: Callable[[str], list[str]]  # a run's id -> what of it was removed


def _places(hosts: dict[str, Host], engines: Engines, clusters: Clusters | None) -> list[Place]:
    """The engines of the run's container hosts, then the clusters of its pod hosts (each
    reached here, its kubeconfig read: a blocking call, made in the pool). A cluster that
    cannot be reached is a place whose every call says why."""
    from ..hosts.leftovers import dead_runs, remove_run

    places = []
    for where, (engine, tls) in _engines_of(hosts).items():
        def client(engine=engine, tls=tls) -> Any:
            return engines.client(engine, tls)
        places.append(Place(where, lambda current, client=client: dead_runs(client(), current),
                            lambda run, client=client: remove_run(client(), run)))
    if clusters is None:
        return places
    from ..hosts.cluster import dead_runs as dead_pod_runs
    from ..hosts.cluster import remove_run as remove_pod_run

    specs = {(h.spec.kubernetes.kubeconfig, h.spec.kubernetes.context): h.spec.kubernetes
             for h in hosts.values() if h.spec.kubernetes is not None}
    for k8s in specs.values():
        try:
            cluster = clusters.get(k8s)
        except NetspecError as exc:
            def refused(_: str, exc: NetspecError = exc) -> Any:
                raise exc
            places.append(Place(f"cluster {k8s.context or '(current context)'}", refused, refused))
            continue
        places.append(Place(cluster.where, lambda current, cluster=cluster: dead_pod_runs(cluster, current),
                            lambda run, cluster=cluster: remove_pod_run(cluster, run)))
    return places


def _not_reached() -> tuple[type[Exception], ...]:
    """What an engine or a cluster that cannot be asked raises (its SDK's loaded only then)."""
    import urllib3

    errors: list[type[Exception]] = [NetspecError, OSError, urllib3.exceptions.HTTPError]
    with contextlib.suppress(ImportError):
        import docker.errors
        errors.append(docker.errors.DockerException)
    with contextlib.suppress(ImportError):
        from kubernetes.client.exceptions import ApiException
        errors.append(ApiException)
    return tuple(errors)


async def sweep_dead_runs(hosts: dict[str, Host], engines: Engines, clusters: Clusters | None, run_id: str,
                          root: Path) -> list[str]:
    """What runs whose controller died left in the engines and clusters of `hosts`: those
    whose directory is under the runs root `root` (ROOT/EXPERIMENT/RUN) collected into it,
    then removed; the others said. Returns a sentence per run."""
    from ..gather.collect import collect_run  # paramiko with it: only once there is a run to collect

    said, failed = [], _not_reached()
    for place in await engines.call(_places, hosts, engines, clusters):
        try:
            dead = await engines.call(place.dead, run_id)
        except failed as exc:  # its hosts' start says it again
            said.append(f"{place.where}: not looked at for what runs whose controller died left there: {exc}")
            continue
        for run, names in dead.items():
            left = f"run {run}, whose controller is gone, left {', '.join(sorted(names))} in {place.where}"
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
            try:
                removed = await engines.call(place.remove, run)
                left += f"; removed {', '.join(removed)}" if removed else "; the collect removed them"
            except failed as exc:
                left += f"; not all removed: {exc}"
            said.append(left)
    return said


async def sweep_own(hosts: dict[str, Host], engines: Engines, clusters: Clusters | None,
                    run_id: str) -> list[str]:
    """What of run `run_id` netspec made and did not keep that is still in its engines and
    clusters after its hosts were stopped, removed. Returns what was, a sentence per place."""
    said, failed = [], _not_reached()
    for place in await engines.call(_places, hosts, engines, clusters):
        try:
            removed = await engines.call(place.remove, run_id)
        except failed as exc:
            said.append(f"{place.where}: what the run left there was not looked for: {exc}")
            continue
        if removed:
            said.append(f"{place.where}: {', '.join(removed)} of the run left after its hosts stopped: "
                        "removed")
    return said
