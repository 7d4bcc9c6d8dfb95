"""The experiment as the controller runs it: frozen dataclasses built by load.py."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from netspec.analysis.graph import user_filter
from netspec.datastream.writer import StreamConfig
from netspec.protocol.kinds import CampSpec, ComponentSpec
from netspec.protocol.links import LinkCondition
from netspec.protocol.runplan import DockerSpec, KubernetesSpec, PlanFault, PlanPackets, PlanRecord

LOCAL_ENGINE = "unix:///var/run/docker.sock"


def engine_url(engine: str | None) -> str:
    """The engine a `docker:` host's `engine:` names: itself, else DOCKER_HOST's, else this
    machine's socket (where the Docker SDK's from_env finds it)."""
    return engine or os.environ.get("DOCKER_HOST") or LOCAL_ENGINE

BUILTIN_STEPS = ("launch", "sync_clocks", "start_logging", "stop_logging", "collect")
# Built-in steps in which every host's daemon is a participant besides the components.
NODE_STEPS = ("sync_clocks", "start_logging", "stop_logging")
DEFAULT_HOST = "local"  # the one host of a file that names none
DEFAULT_DEADLINE_S = 60.0


@dataclass(frozen=True)
class Host:
    """A logical host: a local daemon (none set), one at `address`, one over `ssh`, one in a
    container (`docker`) or in a pod (`kubernetes`: the same records run.json's plan keeps)."""

    name: str
    address: str | None = None
    ssh: str | None = None
    accept_new_host_key: bool = False
    python: str = "python3"
    docker: DockerSpec | None = None
    kubernetes: KubernetesSpec | None = None

    @property
    def local(self) -> bool:
        """A local daemon: it shares this machine's network stack with every other local one
        (link conditions refuse it). A container or a pod has a stack of its own."""
        return self.address is None and self.ssh is None and self.docker is None and self.kubernetes is None


@dataclass(frozen=True)
class Component:
    """A program on a host: NETSPEC-aware (`program`) or a plain `command`."""

    name: str
    host: str
    program: str | None = None
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    start: str = "launch"
    stop: str | None = None
    stop_grace_s: float | None = None  # the file's stop_grace; None: the daemon's own

    @property
    def aware(self) -> bool:
        return self.program is not None

    @property
    def argv(self) -> list[str]:
        return [self.program, *self.args] if self.program is not None else list(self.command)

    def wire(self) -> ComponentSpec:
        """The component as the daemon's `setup` request takes it: the spec the daemon
        decodes and runs (protocol/kinds.py)."""
        shared = {f: getattr(self, f) for f in ComponentSpec.__struct_fields__ if f in _FIELDS}
        return ComponentSpec(**{**shared, "args": list(self.args),
                                "argv": [] if self.program is not None else list(self.command)})


# What a component of the file shares with the spec its daemon gets, by name: a field
# declared in both reaches the daemon.
_FIELDS = frozenset(Component.__dataclass_fields__)


@dataclass(frozen=True)
class LinkRule:
    """A rule of a `links:` list (controller/experiment/links.py): the directed host pairs it
    names, (from, to), and the condition it puts on them (empty: it clears them)."""

    pairs: tuple[tuple[str, str], ...]
    condition: LinkCondition
    line: int | None = None


@dataclass(frozen=True)
class Step:
    """One barrier of the schedule. `components` None means: every component that takes part."""

    phase: str
    components: tuple[str, ...] | None = None
    deadline_s: float = DEFAULT_DEADLINE_S
    need: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    line: int | None = None
    # "message": each host starts when the step's message reaches it; "at": every host
    # starts at one instant of the reference clock, the step sent `lead_s` ahead (None:
    # release.lead_s, by the fleet's size).
    release: str = "message"
    lead_s: float | None = None
    links: tuple[LinkRule, ...] | None = None  # the link conditions changed at its release

    @property
    def builtin(self) -> bool:
        return self.phase in BUILTIN_STEPS


@dataclass(frozen=True)
class ClockService:
    """clksync: `reference` is the global timeline's clock; sync_clocks waits until every
    host's bound is within `until_bound_us`; every other host sends a volley of probes about
    every `interval_ms`."""

    reference: str
    until_bound_us: float | None = None
    interval_ms: float = 200.0
    timestamps: str = "kernel"  # or "user": user-space stamps only


@dataclass(frozen=True)
class CampService:
    """CAMP: each host samples its counters at random instants, one in each `interval_ms`
    slot, during logging windows; None means every interface, disk or component there is."""

    interval_ms: float = 100.0
    interfaces: tuple[str, ...] | None = None
    disks: tuple[str, ...] | None = None
    processes: tuple[str, ...] | None = None

    def wire(self) -> dict[str, Any]:
        return asdict(self)

    def spec(self) -> CampSpec:
        """As `setup` sends it."""
        return CampSpec(**asdict(self))


@dataclass(frozen=True)
class Pair:
    """An interval from one entity's record to another's with the same tag, on any hosts."""

    name: str
    start: str
    end: str
    start_component: str | None = None
    end_component: str | None = None
    match: str = "all"  # which ends of a tag: all, first, last (analysis/pairs.py)


@dataclass(frozen=True)
class Hook:
    """A command around a campaign's runs, on the controller or on named hosts."""

    command: tuple[str, ...]
    hosts: tuple[str, ...] = ()  # none: on the controller


@dataclass(frozen=True)
class Campaign:
    """The sweep's points and how each is repeated (Auto-pilot's FOREACH/FOR and TEST)."""

    points: tuple[dict[str, Any], ...]  # "component.param" -> value, one dict per point
    runs: int = 1
    max_runs: int | None = None
    until: str | None = None  # Getstats predicate over the metric's values across runs
    metric: str | None = None
    statistic: str = "median"
    warmup: int = 0
    hooks: dict[str, tuple[Hook, ...]] = field(default_factory=dict)  # presetup, setup, cleanup, postcleanup
    fastfail: bool = False
    notify: Hook | None = None
    refuse_starved: bool = False  # a run with a component starved of CPU is not counted
    count_partial: bool = False  # a partial run (a k-of-n step, a fault not done) is counted


@dataclass(frozen=True)
class Plan:
    """A validated experiment file, with defaults applied and paths resolved."""

    name: str
    path: Path
    text: str
    sha256: str
    hosts: tuple[Host, ...]
    components: tuple[Component, ...]
    schedule: tuple[Step, ...]
    clock: ClockService
    streams: tuple[StreamConfig, ...] = ()
    camp: CampService | None = None
    packets: PlanPackets | None = None  # the packets: service, its hosts and what they capture
    pairs: tuple[Pair, ...] = ()
    graph: dict[str, dict[str, Any]] = field(default_factory=dict)
    campaign: Campaign | None = None  # a file with sweep:, repeat: or hooks: runs as a campaign
    decoders: tuple[str, ...] = ()  # the user's own event decoders (analysis: decoders:)
    warnings: tuple[str, ...] = ()  # what check found odd but legal, each "file:line: key: text"
    connect_deadline_s: float | None = None  # None: the fleet's own (engine.connect_deadline_s)
    fan_out: int | None = None  # a fan-out tree's width (fanout.py); None: flat
    links: tuple[LinkRule, ...] = ()  # link conditions from the start of the run
    faults: tuple[PlanFault, ...] = ()  # the fault schedule (faults.py), in the file's order
    # A host group's name -> its hosts, a group component's -> its components (groups.py):
    # what takes a name (link conditions, show, the browser) resolves a group's through them.
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    component_groups: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def host_components(self, host: str) -> list[Component]:
        return [c for c in self.components if c.host == host]

    def component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)

    def resolved(self) -> PlanRecord:
        """Everything that decides how the run goes, for run.json (protocol/runplan.py)."""
        resolved = {"experiment": self.name, "source": str(self.path), "sha256": self.sha256,
                    "hosts": [asdict(h) for h in self.hosts],
                    "components": [asdict(c) for c in self.components],
                    "schedule": [_step(s, state)
                                 for s, state in zip(self.schedule, self.link_states(), strict=True)],
                    "clock": asdict(self.clock),
                    "streams": {s.name: s.wire() for s in self.streams},
                    "camp": self.camp.wire() if self.camp else None, "packets": self.packets,
                    "analysis": {"pairs": {p.name: {k: v for k, v in asdict(p).items() if k != "name"}
                                           for p in self.pairs},
                                 "graph": self.graph, "decoders": list(self.decoders)},
                    "warnings": list(self.warnings), "connect_deadline_s": self.connect_deadline_s,
                    "fan_out": self.fan_out, "faults": list(self.faults),
                    "links": [_link(rule) for rule in self.links], "groups": self.groups,
                    "component_groups": self.component_groups}
        return msgspec.convert(resolved, PlanRecord)

    def link_states(self) -> list[dict[tuple[str, str], LinkCondition]]:
        """The condition of every directed pair in effect from each step's release on."""
        state: dict[tuple[str, str], LinkCondition] = {}
        found = []
        for index, step in enumerate(self.schedule):
            for rule in (self.links if index == 0 else ()) + (step.links or ()):
                for pair in rule.pairs:
                    if rule.condition.empty:
                        state.pop(pair, None)
                    else:
                        state[pair] = rule.condition
            found.append(dict(state))
        return found

    def link_changes(self, index: int) -> dict[tuple[str, str], LinkCondition]:
        """The directions step `index`'s release changes, and to what (empty: cleared); the
        launch step's are the top-level rules, then its own."""
        changed: dict[tuple[str, str], LinkCondition] = {}
        for rule in (self.links if index == 0 else ()) + (self.schedule[index].links or ()):
            for pair in rule.pairs:
                changed[pair] = rule.condition
        return changed

    def filter_files(self) -> list[str]:
        """The user filter modules the analysis graph loads from files."""
        return [user[0] for user in map(user_filter, self.graph.values())
                if user is not None and user[0].endswith(".py")]


def _link(rule: LinkRule) -> dict[str, Any]:
    return {"pairs": [list(p) for p in rule.pairs], "condition": rule.condition, "line": rule.line}


def _step(step: Step, state: dict[tuple[str, str], LinkCondition]) -> dict[str, Any]:
    """A step as run.json's plan keeps it: its link rules, and the state of every directed
    pair in effect from its release on ("from->to": condition)."""
    fields = {k: v for k, v in asdict(step).items() if k != "links"}
    if step.links is not None:
        fields["links"] = [_link(rule) for rule in step.links]
    return {**fields, "link_state": {f"{a}->{b}": c for (a, b), c in state.items()}}
