"""What differs between runs: before runs are compared or combined, their records are
checked (pyperf's habit), and every difference is said as `what: before -> after`: the
experiment's name, components, hosts and schedule, its services, streams and analysis, each
program's hash, the versions, each host's facts (CPU model, cores, kernel, ...) and where a
container host was placed (engine, node, image digest, limits, cgroup version: what stays
from one run to the next; the container's id, name, network and cgroup path do not). The
hosts of a fleet that differ alike are said on one line.

`placement_text` is the one wording of a placement that `show`, the report and the browser
print."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from netspec.protocol.errors import ProtocolError
from netspec.protocol.hostfacts import HostFacts, read_facts
from netspec.protocol.names import safe_name
from netspec.protocol.runplan import PlanRecord
from netspec.protocol.runrecord import Placement, RunRecord, read_run

from .graph import user_filter

FOLD = 3  # hosts whose fact differs alike, named each on a line of its own; beyond, on one line
# What of a host's facts (its daemon's facts.json) decides how a run on it goes; its name,
# address and the paths of its Python do not.
HOST_FACTS = ("cpu_model", "cpu_count", "memory_bytes", "kernel", "os", "machine", "clock_source", "python")


@dataclass(frozen=True)
class Provenance:
    """A run's record and what its hosts' daemons said of them (host -> facts.json), as
    `differences` compares them."""

    record: RunRecord
    host_facts: dict[str, HostFacts] = field(default_factory=dict)


def load(run: Path) -> Provenance:
    """The run directory's record (`read_run`) with each host's facts: what its daemon said
    of its host (hosts/<host>/facts.json), a host whose file is missing or unreadable without
    them.

    Raises:
        NetspecError: as `read_run`.
    """
    record = read_run(run)
    return Provenance(record, host_facts(run, record.hosts))


def host_facts(run: Path, hosts: Iterable[str]) -> dict[str, HostFacts]:
    """What each of `hosts` (the run's, by name) said of itself when its daemon was reached
    (hosts/<host>/facts.json); a host whose file is missing or unreadable is left out."""
    found: dict[str, HostFacts] = {}
    for host in sorted(hosts):
        try:
            facts = read_facts(run / "hosts" / safe_name(host, "host") / "facts.json")
        except ProtocolError:  # a name no path is made of
            continue
        if facts is not None:
            found[host] = facts
    return found


def shared_kernels(facts: dict[str, HostFacts]) -> list[list[str]]:
    """Groups of two or more hosts whose daemons ran under one kernel (the same boot_id):
    network namespaces or containers of one machine."""
    by_boot: dict[str, list[str]] = {}
    for host, known in sorted(facts.items()):
        if known.boot_id:
            by_boot.setdefault(known.boot_id, []).append(host)
    return [hosts for hosts in by_boot.values() if len(hosts) > 1]


def facts(run: Provenance | RunRecord) -> dict[str, str]:
    """What decides how a run went, flat: the experiment's name; each component's params,
    program, command, args, env and host; each host's address and facts (those `load`
    read); the schedule; the services (clksync, CAMP), streams and analysis (pairs, graph,
    decoders); each program's hash; the versions. A program or filter module the run kept a
    copy of is its content's hash wherever it is named, its path no fact."""
    if isinstance(run, RunRecord):
        run = Provenance(run)
    record, plan = run.record, run.record.plan or PlanRecord()
    # A program (or filter module) the run kept a copy of is known by its content, not by
    # where it was: a rerun runs the copies, at other paths, and is no other experiment.
    content = {path: f"sha256 {kept.sha256[:12]}" for path, kept in record.programs.items()}
    named: set[str] = set()
    flat: dict[str, str] = {}
    if plan.experiment:
        flat["experiment"] = plan.experiment
    for comp in plan.components:
        for param, value in comp.params.items():
            flat[f"{comp.name}.{param}"] = _text(value)
        for key in ("host", "program", "command", "args", "env", "start", "stop"):
            if value := getattr(comp, key):
                flat[f"{comp.name} {key}"] = content.get(value, value) if key == "program" else _text(value)
        named.add(comp.program or "")
    for host in plan.hosts:
        flat[f"host {host.name}"] = host.ssh or host.address or "local"
    for host, info in sorted(record.hosts.items()):
        if info.placement is not None:
            flat[f"host {host} placement"] = placement_text(info.placement)
    for host, known in sorted(run.host_facts.items()):
        for key in HOST_FACTS:
            if (value := getattr(known, key)) not in (None, ""):
                flat[f"host {host} {key}"] = _text(value)
    for i, step in enumerate(plan.schedule):
        flat[f"step {i}"] = _text({k: v for k, v in msgspec.structs.asdict(step).items() if k != "line"})
    if plan.connect_deadline_s is not None:
        flat["connect_deadline_s"] = _text(plan.connect_deadline_s)
    if plan.fan_out is not None:
        flat["fan_out"] = _text(plan.fan_out)
    if plan.clock:
        flat["services clksync"] = _text(plan.clock)
    if plan.camp:
        flat["services camp"] = _text(plan.camp)
    for name, stream in plan.streams.items():
        flat[f"stream {name}"] = _text(stream)
    for name, pair in plan.analysis.pairs.items():
        flat[f"analysis pair {name}"] = _text({k: v for k, v in msgspec.structs.asdict(pair).items()
                                               if v is not None})
    for name, node in plan.analysis.graph.items():
        user = user_filter(node)
        if user is not None and user[0] in content:
            node = {**node, "filter": f"{content[user[0]]}:{user[1]}"}
            named.add(user[0])
        flat[f"analysis graph {name}"] = _text(node)
    if plan.analysis.decoders:
        flat["analysis decoders"] = _text(plan.analysis.decoders)
    for path, kept in record.programs.items():
        if path not in named:  # said by what runs it, above
            flat[f"program {path} sha256"] = kept.sha256[:12]
    for name, version in record.versions.items():
        flat[f"{name} version"] = version
    return flat


def _text(value: Any) -> str:
    """A value of the plan (a Struct read whole, or a part of one) as one comparable text."""
    return value if isinstance(value, str) else json.dumps(msgspec.to_builtins(value), sort_keys=True)


def placement_text(placement: Placement, whole: bool = False) -> str:
    """Where a container or pod host ran, in words: its kind, engine (a pod's cluster: its
    context and API server), node, image (its digest), limits and cgroup version; `whole`
    adds what is the run's own (the container's or pod's id and name, whether the run
    created it, its network or namespace and its cgroup's path)."""
    limits = placement.limits
    pod = placement.kind == "kubernetes"
    where = (f"kubernetes cluster {placement.context} ({placement.engine})" if pod else
             f"{placement.kind} engine {placement.engine}")
    said = [where, f"node {placement.node or '?'}",
            f"image {placement.image or '?'}" + (f" ({placement.image_id.removeprefix('sha256:')[:12]})"
                                                 if placement.image_id else "")]
    said.append(f"cpus {limits.cpus:g}" if limits.cpus is not None else "cpus unlimited")
    said.append(f"memory {limits.memory_bytes / 2**20:g} MiB" if limits.memory_bytes is not None
                else "memory unlimited")
    if limits.cap_add:
        said.append(f"cap_add {','.join(limits.cap_add)}")
    if placement.cgroup_version is not None:
        said.append(f"cgroup v{placement.cgroup_version}")
    if whole:
        made = "created for the run" if placement.created else "attached"
        said.append(f"{'pod' if pod else 'container'} {placement.container_id[:12] or '?'} "
                    f"{placement.container or ''} ({made})")
        said += [f"{'namespace' if pod else 'network'} {placement.network}" if placement.network else "",
                 f"cgroup path {placement.cgroup}" if placement.cgroup else ""]
    return ", ".join(s for s in said if s)


def placed(record: RunRecord, whole: bool = False, only: set[str] | None = None,
           listed: int = 8) -> list[tuple[str, str]]:
    """Where the run's container hosts (of `only`, if given) ran, as (the hosts, the
    placement in words): the hosts placed alike together, a whole group of the plan by its
    name, the first `listed` others by theirs; with `whole`, each host with its container."""
    alike: dict[str, list[str]] = {}
    for host, info in sorted(record.hosts.items()):
        if info.placement is not None and (only is None or host in only):
            alike.setdefault(placement_text(info.placement, whole), []).append(host)
    groups = record.plan.groups if record.plan is not None else {}
    rows = []
    for text, hosts in alike.items():
        whole_groups = [g for g, members in groups.items() if len(members) > 1 and set(members) <= set(hosts)]
        rest = [h for h in hosts if not any(h in groups[g] for g in whole_groups)]
        named = [f"{g} ({len(groups[g])} hosts)" for g in whole_groups]
        named += rest[:listed] + ([f"{len(rest) - listed} more"] if len(rest) > listed else [])
        rows.append((", ".join(named), text))
    return rows


def differences(before: Provenance | RunRecord, after: Provenance | RunRecord) -> list[str]:
    """Each fact that differs between two runs' records (with their hosts' facts when read
    by `load`), as `what: before -> after`; more than FOLD hosts whose fact differs alike
    are said on one line (`hosts peers-1, peers-2, peers-3 and 197 more (200) placement: ...`)."""
    a, b = facts(before), facts(after)
    keys = [key for key in dict.fromkeys([*a, *b]) if a.get(key) != b.get(key)]
    alike: dict[str, list[str]] = {}  # a host's difference, its name left out -> those hosts
    for key in keys:
        kind, host, rest = [*key.split(" ", 2), "", ""][:3]
        if kind == "host" and rest:
            alike.setdefault(_change(rest, a.get(key), b.get(key)), []).append(host)
    lines = []
    for key in keys:
        kind, host, rest = [*key.split(" ", 2), "", ""][:3]
        change = _change(rest, a.get(key), b.get(key))
        hosts = alike.get(change, []) if kind == "host" and rest else []
        if len(hosts) <= FOLD:
            lines.append(_change(key, a.get(key), b.get(key)))
        elif host == hosts[0]:
            named = ", ".join(hosts[:FOLD]) + f" and {len(hosts) - FOLD} more"
            lines.append(f"hosts {named} ({len(hosts)}) {change}")
    return lines


def _change(what: str, before: str | None, after: str | None) -> str:
    return f"{what}: {before or '(none)'} -> {after or '(none)'}"
