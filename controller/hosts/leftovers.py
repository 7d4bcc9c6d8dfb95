"""What netspec made in a Docker engine for a run, found again by its labels: the run's own
leftovers at its end, and those of runs whose controller died, which the next run on the
engine finds (controller/engine/leftovers.py collects and removes them).

Every container made for a run carries its run (RUN_LABEL), CREATED_LABEL, the controller
that made it (CONTROLLER_LABEL: this machine's boot id, the controller's pid and its start
time, so a pid used again is not taken for it) and, kept by --keep-daemons, KEPT_LABEL; the
run's network carries the run and CREATED_LABEL. A controller is known dead only on the
machine it ran on: another machine's containers are left to their own controller.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .engines import CREATED_LABEL, remove_network

RUN_LABEL, HOST_LABEL = "org.netspec.run", "org.netspec.host"
CONTROLLER_LABEL = "org.netspec.controller"
KEPT_LABEL = "org.netspec.kept"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def controller_id(pid: int) -> str:
    """The label of the controller `pid` of this machine: boot id, pid and start time."""
    return f"{BOOT_ID.read_text().strip()}:{pid}:{_started(pid)}"


def _started(pid: int) -> str:
    """The process's start time in clock ticks since boot (/proc/PID/stat's 22nd field), or
    "" if there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    except (OSError, IndexError):
        return ""


def controller_gone(label: str) -> bool:
    """Whether the controller the label names is known to be gone: of this machine's boot,
    and its pid no longer that process. A label of another boot may be another machine's."""
    boot, _, rest = label.partition(":")
    pid, _, started = rest.partition(":")
    if boot != BOOT_ID.read_text().strip() or not pid.isdigit():
        return False
    return _started(int(pid)) != started


def dead_runs(client: Any, current: str) -> dict[str, list[str]]:
    """The runs (but `current`) whose containers are in the engine, made by a controller of
    this machine that is gone and not kept: run id -> its containers' names."""
    found: dict[str, list[str]] = {}
    for container in client.containers.list(all=True, filters={"label": f"{CREATED_LABEL}=1"}):
        labels = container.labels or {}
        run, made_by = labels.get(RUN_LABEL), labels.get(CONTROLLER_LABEL)
        if run is None or run == current or KEPT_LABEL in labels or made_by is None:
            continue
        if controller_gone(made_by):
            found.setdefault(run, []).append(container.name)
    return found


def remove_run(client: Any, run_id: str) -> list[str]:
    """Remove what netspec made in the engine for `run_id` and did not keep: its containers
    (a kill, then the removal), then its network once empty. Returns what it removed, each
    named ("container NAME", "network NAME")."""
    import docker.errors

    removed = []
    made = {"label": [f"{RUN_LABEL}={run_id}", f"{CREATED_LABEL}=1"]}
    for container in client.containers.list(all=True, filters=made):
        if KEPT_LABEL in (container.labels or {}):
            continue
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            continue
        removed.append(f"container {container.name}")
    for network in client.networks.list(filters=made):
        remove_network(client, network.name)
        try:
            client.networks.get(network.id)
        except docker.errors.NotFound:
            removed.append(f"network {network.name}")
    return removed
