"""Experiment file to Plan: YAML with line numbers, JSON Schema, then semantic checks.

The published schema (experiment.schema.json, checked in schemacheck.py) is the single
source of the file's shape; this module adds what a schema cannot say (references between
sections, files that must exist, phase order, what a step can need) and turns every error
into "file:line: key: message".
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shlex
from pathlib import Path
from typing import Any

import msgspec
from netspec.analysis.graph import GraphError, check_node, user_filter
from netspec.analysis.usercode import absolute
from netspec.datastream.writer import StreamConfig
from netspec.protocol.errors import ConfigError, some_hosts
from netspec.protocol.messages import NODE
from netspec.protocol.packets import PacketsSpec
from netspec.protocol.runplan import DockerSpec, KubernetesSpec, PlanPackets

from .campaignfile import CAMPAIGN_KEYS, campaign_of, point_text, with_point
from .declared import check_stream_patterns, listing, takes_part
from .durations import parse_duration
from .faults import faults_of
from .groups import Groups, expand
from .launchcost import MARGIN, Launch, launch_here, refusal
from .links import links_of, local_hosts
from .model import (
    DEFAULT_DEADLINE_S,
    DEFAULT_HOST,
    NODE_STEPS,
    CampService,
    ClockService,
    Component,
    Host,
    Pair,
    Plan,
    Step,
    engine_url,
)
from .schemacheck import prune, schema_error, validator
from .sourcefile import Path_, SourceFile, key_name, suggest

BUILTIN_DEADLINES_S = {"launch": 30.0, "sync_clocks": 30.0, "collect": 60.0}
FLEET_S_PER_COMPONENT = 0.1
MAX_STOP_GRACE_S = 3600.0  # a component's stop_grace at most


def load(path: str | Path) -> Plan:
    """Read, validate and resolve an experiment file.

    Raises:
        ConfigErrors: every problem found, each naming the file, line and key.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", str(path)) from exc
    return parse(text, path)


def parse(text: str, path: Path, programs: dict[str, str] | None = None, *,
          point: dict[str, Any] | None = None, shown: Path | None = None) -> Plan:
    """The plan of `text`, as if read from `path` (relative paths start at its folder).
    `programs` maps a program's resolved path to the file to run instead: a run
    directory's copy, when a run is repeated from it alone. `point` makes the plan one
    point of the campaign `text` is (its text the point's file, `point_text`); `shown` is
    the file that errors and warnings name, when `text` was read from another than `path`.

    Raises:
        ConfigErrors: every problem found, each naming the file, line and key.
    """
    src = SourceFile(shown or path, text)
    data = src.data
    if not isinstance(data, dict):
        src.error("an experiment file is a YAML mapping", ())
    rejected = list(validator().iter_errors(data))
    for error in rejected:
        with src.checking():
            schema_error(src, error)
    for error in rejected:
        src.misshapen.append((key_name(tuple(error.absolute_path)), prune(data, error)))
    if point is not None and not rejected:
        # Resolved from the campaign file's own data, so that every line cited is its line.
        text = point_text(text, point)
        with_point(data, point)
    groups = Groups()
    try:
        expanded, groups = expand(src, data)
        plan = _resolve(src, expanded, path, programs or {}, text, data, groups)
    except (KeyError, TypeError, AttributeError, ValueError, IndexError):
        # A check tripped over a shape the schema rejected, and that error is recorded.
        if not src.errors:
            raise
    groups.named(src)
    src.raise_errors()
    return dataclasses.replace(plan, warnings=tuple(src.warnings)) if groups.hosts else plan


def _resolve(src: SourceFile, data: dict[str, Any], path: Path, programs: dict[str, str],
             text: str, written: dict[str, Any], groups: Groups) -> Plan:
    """The plan of `data` (its groups expanded; `written`, the file as written, for the
    sweep's checks)."""
    hosts = _hosts(src, data)
    names = list(data["components"])
    components = tuple(c for name, spec in data["components"].items()
                       if (c := src.checked(_component, src, name, spec, hosts, path.parent, programs)))
    launch = launch_here(components, hosts)
    schedule = _schedule(src, data["schedule"], names, hosts, groups.hosts, launch)
    links = links_of(src, data.get("links"), ("links",), hosts, groups.hosts)
    _check_plain_phases(src, components, schedule)
    _check_needs(src, data["schedule"], components, len(hosts))
    clock = src.checked(_clock, src, data.get("services", {}).get("clksync", {}), hosts)
    streams = _streams(src, data.get("streams") or {}, names)
    check_stream_patterns(src, data.get("streams") or {}, components)
    camp = src.checked(_camp, src, data.get("services", {}).get("camp"), names)
    packets = src.checked(_packets, src, data.get("services", {}).get("packets"), hosts, groups.hosts)
    analysis = data.get("analysis") or {}
    pairs = _pairs(src, analysis.get("pairs", {}), [*names, *groups.components])
    graph = _graph(src, analysis.get("graph", {}), schedule, path.parent)
    campaign = (src.checked(campaign_of, src, data, hosts, components, written)
                if CAMPAIGN_KEYS & set(data) else None)
    _check_step_params(src, data, components)
    faults = faults_of(src, data.get("faults") or [], hosts, groups.hosts, components, schedule,
                       data.get("fan_out"))
    return Plan(data["experiment"], path.resolve(), text,
                hashlib.sha256(text.encode()).hexdigest(), tuple(hosts.values()), components,
                schedule, clock, streams, camp, packets, pairs, graph, campaign,
                tuple(analysis.get("decoders") or ()), tuple(src.warnings),
                None if "connect_deadline" not in data else parse_duration(data["connect_deadline"]),
                data.get("fan_out"), links, faults, groups.hosts, groups.components)


def _check_step_params(src: SourceFile, data: dict[str, Any], components: tuple[Component, ...]) -> None:
    """A step's params win over its components' own: said as a warning where the step does
    not name its components (its params then reach every component that has the param, which
    the file may not mean), not where it does (`components:` gives those components its params
    on purpose); an error where it would hide a swept param (every point of the sweep would
    run alike)."""
    swept = set((data.get("sweep") or {}).get("params") or {})
    for i, item in enumerate(data["schedule"]):
        if not isinstance(item, dict):
            continue
        for key, value in (item.get("params") or {}).items():
            where: Path_ = ("schedule", i, "params", key)
            for comp in components:
                if item.get("components") and comp.name not in item["components"]:
                    continue
                if f"{comp.name}.{key}" in swept:
                    with src.checking():
                        src.error(f"overrides the swept param {comp.name}.{key} in phase "
                                  f"'{item['phase']}': every point of the sweep would run alike", where)
                elif key in comp.params and comp.params[key] != value and not item.get("components"):
                    src.warn(f"overrides param {key} of component '{comp.name}' in phase "
                             f"'{item['phase']}': {comp.params[key]!r} -> {value!r} (a step that names "
                             "its components gives them its params without a warning)", where)


def _pairs(src: SourceFile, pairs: dict[str, dict[str, str]], names: list[str]) -> tuple[Pair, ...]:
    for name, p in pairs.items():
        for key in ("start_component", "end_component"):
            if key in p:
                with src.checking():
                    src.known("component", p[key], names, ("analysis", "pairs", name, key))
    return tuple(Pair(name, **p) for name, p in pairs.items())


def _graph(src: SourceFile, graph: dict[str, dict[str, Any]], schedule: tuple[Step, ...],
           base: Path) -> dict[str, dict[str, Any]]:
    """The analysis graph, every node checked; a filter file's path made absolute."""
    resolved, phases = {}, [s.phase for s in schedule]
    for name, spec in graph.items():
        try:
            check_node(name, spec, list(resolved), base, phases)
        except GraphError as exc:
            with src.checking():
                src.error(str(exc), ("analysis", "graph", name, *exc.key))
        resolved[name] = {**spec, "filter": absolute(spec["filter"], base)} if user_filter(spec) else spec
    return resolved


def _hosts(src: SourceFile, data: dict[str, Any]) -> dict[str, Host]:
    given = data.get("hosts") or {DEFAULT_HOST: {}}
    for name, spec in given.items():
        if spec and "address" in spec and "ssh" in spec:
            with src.checking():
                src.error("give 'address' (a running daemon) or 'ssh' (reached over SSH), not both",
                      ("hosts", name))
        if spec and "ssh" in spec and "fan_out" in data:
            with src.checking():
                # Its daemon listens on the host's own 127.0.0.1, behind the SSH tunnel:
                # no other daemon of the tree could relay to it.
                src.error(f"a host reached over SSH cannot be in a fan-out tree (fan_out: at line "
                          f"{src.line(('fan_out',))}); drop fan_out, or give its daemon's address",
                          ("hosts", name, "ssh"))
        if spec and "ssh" in spec:
            with src.checking():
                _check_ssh(src, name, spec["ssh"])
        if spec and "docker" in spec and ("address" in spec or "ssh" in spec):
            with src.checking():
                src.error("a docker host is reached through its engine: give 'docker', not 'address' "
                          "or 'ssh'", ("hosts", name))
        if spec and "kubernetes" in spec and ({"address", "ssh", "docker"} & set(spec)):
            with src.checking():
                src.error("a kubernetes host is a pod its cluster runs: give 'kubernetes', not 'address', "
                          "'ssh' or 'docker'", ("hosts", name))
        if spec and isinstance(spec.get("docker"), dict):
            with src.checking():
                _check_plain_tcp(src, name, spec["docker"])
            if "packages" in spec["docker"] and ("image" in spec["docker"] or "container" in spec["docker"]):
                with src.checking():
                    src.error("'packages' go into netspec's own image: with an image or a container of "
                              "your own, install them there", ("hosts", name, "docker", "packages"))
    if "fan_out" in data:
        _check_docker_tree(src, given)
    return {name: _host(name, spec or {}) for name, spec in given.items()}


def _check_plain_tcp(src: SourceFile, name: str, docker: dict[str, Any]) -> None:
    """A tcp:// engine without TLS carries in clear all the controller tells it, the host's
    key for the run with it, and lets anyone on the network drive the engine: refused unless
    the file says `insecure_tcp: true`, and then warned of (the run's output, run.json's
    plan). DOCKER_HOST counts where `engine:` is not given, with TLS if DOCKER_TLS_VERIFY is
    set (the Docker SDK's from_env reads both)."""
    given = docker.get("engine")
    url = engine_url(given)
    if not url.startswith("tcp://"):
        return
    tls = docker.get("tls") if given else os.environ.get("DOCKER_TLS_VERIFY") or None
    where = ("hosts", name, "docker", "engine") if given else ("hosts", name, "docker")
    said = f"engine {url}" + ("" if given else " (DOCKER_HOST)")
    if tls:
        return
    if docker.get("insecure_tcp") is True:
        src.warn(f"{said} is reached without TLS (insecure_tcp: true): what the controller sends it, "
                 "the host's key for the run included, crosses the network in clear, and anyone on "
                 "that network may drive the engine", where)
        return
    src.error(f"{said} would be reached without TLS: give tls: {{ca, cert, key}}"
              + ("" if given else " (or DOCKER_TLS_VERIFY and DOCKER_CERT_PATH)")
              + ", or insecure_tcp: true to send it everything in clear", where)


def _check_docker_tree(src: SourceFile, given: dict[str, Any]) -> None:
    """A fan-out tree's relays reach their children at the address the controller reached
    them at: containers of one engine reach each other on the run's network, but a daemon in
    a container cannot reach a local one (at the controller's 127.0.0.1), nor a container of
    another engine. Refused here, each host by name, rather than when the tree is built."""
    def engine(spec: Any) -> Any:
        if isinstance(spec, dict) and isinstance(spec.get("kubernetes"), dict):
            return ("cluster", spec["kubernetes"].get("kubeconfig"), spec["kubernetes"].get("context"))
        docker = spec.get("docker") if isinstance(spec, dict) else None
        return None if docker is None else ("engine", engine_url((docker or {}).get("engine")))
    engines = {name: engine(spec) for name, spec in given.items()}
    kinds = set(engines.values())
    if len(kinds) < 2 or not any(kinds):
        return
    for name, kind in engines.items():
        if kind is None:
            continue
        others = [n for n, k in engines.items() if k != kind]
        with src.checking():
            src.error(f"a docker host is in a fan-out tree (fan_out: at line {src.line(('fan_out',))}) "
                      f"only with docker hosts of its engine: its daemon, in a container, and those of "
                      f"{some_hosts(others)} cannot reach one another to relay; drop fan_out, or run "
                      "every host in containers of one engine", ("hosts", name, "docker"))


def _host(name: str, spec: dict[str, Any]) -> Host:
    # the engine's record converted: its lists become the spec's tuples
    if spec.get("docker") is not None:
        return Host(name, **{**spec, "docker": msgspec.convert(spec["docker"], DockerSpec)})
    if spec.get("kubernetes") is not None:
        return Host(name, **{**spec, "kubernetes": msgspec.convert(spec["kubernetes"], KubernetesSpec)})
    return Host(name, **spec)


def _check_ssh(src: SourceFile, host: str, target: str) -> None:
    """Warns of an SSH target this machine knows nowhere: no address, not in /etc/hosts nor
    in the SSH config. Only those are read: `check` sends nothing off the machine."""
    from .sshtargets import CONFIG_ENV, known_here  # paramiko: only for a file with SSH hosts

    known, aliases = known_here(target)
    if not known:
        name = target.rpartition("@")[2].partition(":")[0]
        src.warn(f"host '{host}': '{name}' is no address, no alias of the SSH config (~/.ssh/config, "
                 f"${CONFIG_ENV}) and not in /etc/hosts{suggest(name, aliases)}; unless DNS knows it "
                 "(check asks no server), the run cannot reach it", ("hosts", host, "ssh"))


def _component(src: SourceFile, name: str, spec: dict[str, Any], hosts: dict[str, Host],
               base: Path, programs: dict[str, str]) -> Component:
    where: Path_ = ("components", name)
    if name == NODE:
        src.error(f"'{NODE}' is the daemon's own name in node-wide steps; choose another", where)
    host = spec.get("host")
    if host is None:
        if len(hosts) > 1:
            src.error("missing key 'host' (required when there is more than one host)", where)
        host = next(iter(hosts))
    else:
        src.known("host", host, hosts, (*where, "host"))
    if ("program" in spec) == ("command" in spec):
        src.error("give exactly one of 'program' (NETSPEC-aware) or 'command' (plain)", where)
    program, command = None, ()
    if "program" in spec:
        program_path = (base / spec["program"]).resolve()
        program_path = Path(programs.get(str(program_path), program_path))
        if not program_path.is_file():
            src.error(f"program '{spec['program']}' not found (looked at {program_path})",
                      (*where, "program"))
        program = str(program_path)
        for key in ("start", "stop"):
            if key in spec:
                src.error("start/stop apply to plain commands only; a program registers "
                          "its phases", (*where, key))
    else:
        raw = spec["command"]
        command = (("/bin/sh", "-c", raw) if isinstance(raw, str) else tuple(map(str, raw)))
        if not command or not command[0]:
            src.error("empty command", (*where, "command"))
        if "args" in spec:
            command = (*command, *map(str, spec["args"]))
            if isinstance(raw, str):
                src.error("args go with a command list, not a shell string; write them into "
                          f"the string: {shlex.join(map(str, spec['args']))}", (*where, "args"))
    return Component(name, host, program, command,
                     tuple(map(str, spec.get("args", ()))) if program else (),
                     dict(spec.get("params", {})), {k: str(v) for k, v in spec.get("env", {}).items()},
                     spec.get("start", "launch"), spec.get("stop"), _stop_grace(src, spec, where))


def _stop_grace(src: SourceFile, spec: dict[str, Any], where: Path_) -> float | None:
    if "stop_grace" not in spec:
        return None
    grace = parse_duration(spec["stop_grace"])
    if grace > MAX_STOP_GRACE_S:
        src.error(f"{grace:g} s is longer than a stop grace may be ({MAX_STOP_GRACE_S:g} s)",
                  (*where, "stop_grace"))
    return grace


def _schedule(src: SourceFile, raw: list[Any], names: list[str], hosts: dict[str, Host],
              groups: dict[str, tuple[str, ...]], launch: Launch) -> tuple[Step, ...]:
    steps = []
    for i, item in enumerate(raw):
        spec = {"phase": item} if isinstance(item, str) else item
        where: Path_ = ("schedule", i)
        phase = spec["phase"]
        listed = spec.get("components")
        for j, comp in enumerate(listed or ()):
            with src.checking():
                src.known("component", comp, names, (*where, "components", j))
        with src.checking():
            _check_step(src, i, spec, len(raw), synced="sync_clocks" in (s.phase for s in steps))
        deadline = spec.get("deadline")
        deadline_s = (parse_duration(deadline) if deadline is not None
                      else default_deadline_s(phase, len(names), launch))
        if why := refusal(phase, launch, deadline_s, default_deadline_s(phase, len(names), launch)):
            with src.checking():
                src.error(why, (*where, "deadline"))
        steps.append(Step(phase, tuple(listed) if listed else None, deadline_s, spec.get("need"),
                          dict(spec.get("params", {})), src.line(where), spec.get("release", "message"),
                          None if "lead" not in spec else parse_duration(spec["lead"]),
                          links_of(src, spec["links"], (*where, "links"), hosts, groups)
                          if "links" in spec else None))
    # launch and collect bracket every run; the resolved plan says so even if the file did not.
    if steps[0].phase != "launch":
        steps.insert(0, Step("launch", deadline_s=default_deadline_s("launch", len(names), launch)))
    if steps[-1].phase != "collect":
        steps.append(Step("collect", deadline_s=default_deadline_s("collect", len(names))))
    return tuple(steps)


def default_deadline_s(phase: str, components: int, launch: Launch | None = None) -> float:
    """A step's deadline where the file gives none. Starting and gathering grow with the
    fleet: past a hundred components, launch and collect get 0.1 s more for each; and
    launch and start_logging at least launchcost.MARGIN times what this machine's cores take
    to start its programs, and their streams (`launch`)."""
    base = BUILTIN_DEADLINES_S.get(phase, DEFAULT_DEADLINE_S)
    if phase in ("launch", "collect"):
        base += FLEET_S_PER_COMPONENT * max(0, components - 100)
    return max(base, MARGIN * launch.floor_of(phase)) if launch else base


def _check_step(src: SourceFile, i: int, spec: dict[str, Any], steps: int, synced: bool) -> None:
    where: Path_ = ("schedule", i)
    phase, listed = spec["phase"], spec.get("components")
    if spec.get("release") == "at" and not synced:
        src.error("'release: at' takes an instant on the reference clock, which hosts know only "
                  "after sync_clocks: put sync_clocks before this step", (*where, "release"))
    if "lead" in spec and spec.get("release") != "at":
        src.error("'lead' is how far ahead a 'release: at' step is sent; this step is released "
                  "by message", (*where, "lead"))
    if spec.get("need") and listed and spec["need"] > len(listed):
        src.error(f"need {spec['need']} of only {len(listed)} components", (*where, "need"))
    if phase in ("launch", "collect") and listed:
        src.error(f"'{phase}' always takes every component; drop 'components'", where)
    if phase == "launch" and i != 0:
        src.error("'launch' must be the first step", where)
    if phase == "collect" and i != steps - 1:
        src.error("'collect' must be the last step", where)


def _check_needs(src: SourceFile, raw: list[Any], components: tuple[Component, ...], hosts: int) -> None:
    """A step's `need` is at most the participants it can have: those it lists, or each
    program that may register its phase (all but those whose file registers others only),
    each plain command the phase starts or stops, and in a node-wide step each host's daemon."""
    for i, item in enumerate(raw):
        if not isinstance(item, dict) or not item.get("need") or item.get("components"):
            continue  # a step that lists its components is checked with them (_check_step)
        phase = item["phase"]
        who = [c.name for c in components if takes_part(c, phase)]
        count = len(who) + (hosts if phase in NODE_STEPS else 0)
        if item["need"] > count:
            daemons = f" and {hosts} host daemon(s)" if phase in NODE_STEPS else ""
            with src.checking():
                src.error(f"need {item['need']} in step '{phase}', which has at most {count} "
                          f"participant(s): {listing(who) if who else 'no component'}{daemons}",
                          ("schedule", i, "need"))


def _check_plain_phases(src: SourceFile, components: tuple[Component, ...],
                        schedule: tuple[Step, ...]) -> None:
    for comp in components:
        if not comp.aware:
            with src.checking():
                _check_plain_phase(src, comp, schedule)


def _check_plain_phase(src: SourceFile, comp: Component, schedule: tuple[Step, ...]) -> None:
    order = [s.phase for s in schedule]
    where: Path_ = ("components", comp.name)
    for key, phase in (("start", comp.start), ("stop", comp.stop)):
        if phase is None:
            continue
        if phase not in order:
            src.error(f"{key} phase '{phase}' is not in the schedule{suggest(phase, order)}",
                      (*where, key))
        step = schedule[order.index(phase)]
        if step.components is not None and comp.name not in step.components:
            src.error(f"{key} phase '{phase}' lists components {', '.join(step.components)} "
                      f"(line {step.line}) and not '{comp.name}': it would never {key}", (*where, key))
    if comp.stop is not None and order.index(comp.stop) <= order.index(comp.start):
        src.error(f"stop phase '{comp.stop}' does not come after start phase '{comp.start}'",
                  (*where, "stop"))
    if comp.stop in order and comp.stop_grace_s is not None:
        # Its stop step would end at its deadline, the component still in its grace: the
        # step fails before the SIGKILL the grace was to put off.
        step = schedule[order.index(comp.stop)]
        if comp.stop_grace_s >= step.deadline_s:
            src.error(f"stop_grace {comp.stop_grace_s:g} s is not shorter than the deadline of its stop "
                      f"phase '{comp.stop}' ({step.deadline_s:g} s): give that step a longer deadline, "
                      "or a shorter grace", (*where, "stop_grace"))


def _clock(src: SourceFile, spec: dict[str, Any], hosts: dict[str, Host]) -> ClockService:
    reference = spec.get("reference", next(iter(hosts)))
    src.known("host", reference, hosts, ("services", "clksync", "reference"))
    return ClockService(reference, spec.get("until_bound_us"), spec.get("interval_ms", 200.0),
                        spec.get("timestamps", "kernel"))



def _camp(src: SourceFile, spec: dict[str, Any] | None, names: list[str]) -> CampService | None:
    if spec is None:
        return None
    for i, comp in enumerate(spec.get("processes") or []):
        src.known("component", comp, names, ("services", "camp", "processes", i))
    return CampService(spec.get("interval_ms", 100.0),
                       *(tuple(spec[k]) if spec.get(k) is not None else None
                         for k in ("interfaces", "disks", "processes")))


def _packets(src: SourceFile, spec: dict[str, Any] | None, hosts: dict[str, Host],
             groups: dict[str, tuple[str, ...]]) -> PlanPackets | None:
    """The `packets:` service: its hosts (named, or every host but local daemons, which share
    this machine's stack: a packet between them crosses lo, seen once, never at two ends)."""
    if spec is None:
        return None
    where: Path_ = ("services", "packets")
    local = local_hosts(hosts)
    if "hosts" in spec:
        named = [h for name in spec["hosts"] for h in groups.get(name, (name,))]
        for i, name in enumerate(spec["hosts"]):
            with src.checking():
                if name not in hosts and name not in groups:
                    src.known("host", name, hosts, (*where, "hosts", i))
                if any(h in local for h in groups.get(name, (name,))):
                    src.error(f"host '{name}' is a local daemon: local daemons share this machine's network "
                              "stack, where a packet between them is seen once, not at its two ends; give it "
                              "ssh: or docker:, or leave it out", (*where, "hosts", i))
    else:
        named = [h for h in hosts if h not in local]
        if local:
            src.warn(f"packets: {', '.join(sorted(local))} not captured: local daemons share this machine's "
                     "network stack, where a packet between them is seen once, not at its two ends", where)
        if not named:
            src.error("packets: every host is a local daemon, and none can capture: give hosts ssh: or "
                      "docker:", where)
    try:
        given = ("snaplen", "count", "ports", "filter", "own", "buffer_kib")
        packets = PacketsSpec(**{k: spec[k] for k in given if k in spec})
    except (TypeError, ValueError) as exc:
        src.error(str(exc), where)
    return PlanPackets(tuple(dict.fromkeys(named)), packets)


def _streams(src: SourceFile, spec: dict[str, Any], names: list[str]) -> tuple[StreamConfig, ...]:
    for name, stream in spec.items():
        for i, comp in enumerate(stream.get("components", [])):
            with src.checking():
                src.known("component", comp, names, ("streams", name, "components", i))
        if stream.get("trigger") and not stream.get("ring_chunks"):
            with src.checking():
                src.error("a trigger writes a ring stream's chunks: give ring_chunks too",
                      ("streams", name, "trigger"))
    return tuple(StreamConfig.from_map(name, stream) for name, stream in spec.items())
