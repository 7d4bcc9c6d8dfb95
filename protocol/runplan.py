"""run.json's `plan`: the experiment as it ran, typed. The controller makes it of its model
(controller/experiment/model.py's `Plan.resolved`) and protocol/runrecord.py's `RunRecord`
holds it; `collect` reaches its hosts, `rerun` re-reads its source, provenance diffs two,
the merge takes its pairs, decoders and graph, all through these Structs.

Every key is optional (records written before a key existed read with its default): hosts
named only, as the first records did, a schedule step without release: or lead_s:, a plan
without streams, camp or analysis.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .links import LinkCondition
from .packets import PacketsSpec

__all__ = ["DockerSpec", "PlanAnalysis", "PlanCamp", "PlanClock", "PlanComponent", "PlanFault", "PlanHost",
           "PlanLink", "PlanPackets", "PlanPair", "PlanRecord", "PlanStep", "PlanStream"]


class DockerSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A host in a container (`docker:`, controller/hosts/docker.py): the engine (None: this
    machine's), its TLS files for tcp://, the image (None: netspec's of this build, with the
    extra Debian `packages` in it that `ns_control image build --package` put there), the
    limits and capabilities; or the container to attach to, by name or by a label's
    key=value. `prefix` begins the names of what the run creates; `network` replaces the
    run's own network."""

    engine: str | None = None
    tls: dict[str, str] | None = None
    insecure_tcp: bool = False  # a tcp:// engine without TLS, asked for in so many words
    image: str | None = None
    packages: tuple[str, ...] = ()
    cpus: float | None = None
    memory: str | int | None = None  # bytes, or with k, m or g (engines.memory_bytes)
    cap_add: tuple[str, ...] = ("NET_ADMIN", "SYS_NICE")
    container: str | None = None
    label: str | None = None
    network: str | None = None
    prefix: str = "netspec"


class KubernetesSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A host in a pod (`kubernetes:`, controller/hosts/pods.py): the cluster (the kubeconfig
    file and its context; None: kubectl's choice), the namespace (None: one made for the run),
    the image (None: netspec's, with the extra Debian `packages`), already in the nodes'
    runtime (no registry), the CPU and memory (requests and limits alike), the nodes it may
    run on (`node_selector`) and its capabilities. `prefix` begins the names of what the run
    creates."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    image: str | None = None
    packages: tuple[str, ...] = ()
    cpus: float | None = None
    memory: str | int | None = None  # bytes, or with k, m or g (engines.memory_bytes)
    node_selector: dict[str, str] = {}
    cap_add: tuple[str, ...] = ("NET_ADMIN", "SYS_NICE")
    prefix: str = "netspec"


class PlanHost(msgspec.Struct):
    """A logical host: a local daemon (none set), one at `address`, one over `ssh`, one in a
    container (`docker`) or in a pod (`kubernetes`)."""

    name: str
    address: str | None = None
    ssh: str | None = None
    accept_new_host_key: bool = False
    python: str = "python3"
    docker: DockerSpec | None = None
    kubernetes: KubernetesSpec | None = None


class PlanComponent(msgspec.Struct):
    """A program on a host: NETSPEC-aware (`program`) or a plain `command`."""

    name: str
    host: str
    program: str | None = None
    command: list[str] = []
    args: list[str] = []
    params: dict[str, Any] = {}
    env: dict[str, str] = {}
    start: str = "launch"
    stop: str | None = None


class PlanLink(msgspec.Struct):
    """A rule of a `links:` list: the directed host pairs it names ([from, to]) and the
    condition it puts on them (at its defaults: it clears them), and its line in the file."""

    pairs: list[tuple[str, str]]
    condition: LinkCondition = LinkCondition()
    line: int | None = None


class PlanStep(msgspec.Struct):
    """A barrier of the schedule (`components` None: every component that takes part) and
    the line of the experiment file it was on; the link rules its release applies, and the
    condition of every directed pair in effect from then on ("from->to": condition; a pair
    not named has none)."""

    phase: str
    components: list[str] | None = None
    deadline_s: float = 60.0
    need: int | None = None
    params: dict[str, Any] = {}
    line: int | None = None
    release: str = "message"
    lead_s: float | None = None
    links: list[PlanLink] | None = None
    link_state: dict[str, LinkCondition] = {}


class PlanClock(msgspec.Struct):
    """clksync as the file asked for it: the reference host, the bound sync_clocks waits
    for, the probe interval and the timestamps' source."""

    reference: str | None = None
    until_bound_us: float | None = None
    interval_ms: float = 200.0
    timestamps: str = "kernel"


class PlanStream(msgspec.Struct):
    """A stream as the file's `streams:` section describes it (datastream/writer.py's
    StreamConfig.wire)."""

    enable: list[str] = []
    disable: list[str] = []
    ring_chunks: int = 0
    trigger: list[str] = []
    chunk_records: int | None = None
    flush_ms: int | None = None
    components: list[str] | None = None


class PlanCamp(msgspec.Struct):
    """CAMP as the file asked for it (None: every interface, disk or component)."""

    interval_ms: float = 100.0
    interfaces: list[str] | None = None
    disks: list[str] | None = None
    processes: list[str] | None = None


class PlanPair(msgspec.Struct):
    """An interval from one entity's record to another's with the same tag (analysis/pairs.py)."""

    start: str
    end: str
    start_component: str | None = None
    end_component: str | None = None
    match: str = "all"


class PlanAnalysis(msgspec.Struct):
    """The file's `analysis:`: its pairs by name, its graph's nodes by name (analysis/graph.py
    checks a node), and the user's own decoders it allows."""

    pairs: dict[str, PlanPair] = {}
    graph: dict[str, dict[str, Any]] = {}
    decoders: list[str] = []


class PlanFault(msgspec.Struct, frozen=True):
    """An entry of the file's `faults:` (controller/experiment/faults.py): its kind, what it is
    done to (a component, or a host for cpu, memory and disk pressure) and the host where it
    happens, its instant (`after_s` from the start of the first step of `phase`, or from the
    run's first step with no phase), how long it lasts (`for_s`: a pause's, a pressure's), a
    pressure's size in bytes or busy workers, and its line in the file. A partition or heal
    names the hosts of each side (`sides`: a direction per pair of hosts on different
    sides, each done by the host it leaves; `host` and `target` say the first side and the
    rest). A fault aimed at a `role` has its target chosen at its instant: the component
    holding it (`target` and `host` empty), or for a partition or heal isolating it, that
    component's host against every host of `sides`' one side. The loaded plan's faults are
    these (frozen), as run.json keeps them."""

    kind: str
    target: str
    host: str
    after_s: float = 0.0
    phase: str | None = None
    for_s: float | None = None
    size: int | None = None
    workers: int | None = None
    line: int | None = None
    sides: tuple[tuple[str, ...], ...] = ()
    role: str | None = None

    def directions(self, isolated: str | None = None) -> list[tuple[str, str]]:
        """A partition's or heal's directions, (from, to) for each pair of hosts on different
        sides; of a role's, those between `isolated` (its holder's host) and every other host
        of its one side, or with no `isolated`, every direction it may come to cut."""
        sides = self.sides
        if self.role is not None:
            sides = tuple((h,) for h in sides[0]) if isolated is None else \
                ((isolated,), tuple(h for h in sides[0] if h != isolated))
        return [(a, b) for i, one in enumerate(sides) for j, other in enumerate(sides) if i != j
                for a in one for b in other if a != b]


class PlanPackets(msgspec.Struct, frozen=True):
    """The `packets:` service as the file asked it (controller/experiment/load.py): the hosts
    that capture, and what each captures (protocol/packets.py's PacketsSpec, sent at setup)."""

    hosts: tuple[str, ...] = ()
    spec: PacketsSpec = PacketsSpec()


class PlanRecord(msgspec.Struct):
    """The experiment as it ran: its name, its file (`source`) and the file's sha256, its
    hosts, components, schedule and services, its analysis, what check warned of, and the
    connect deadline and fan-out width it asked for (None: the fleet's own; flat), the
    link conditions that hold from the start of the run, and its groups: a host group's
    name -> its hosts, a group component's -> its components, in the order the file's
    expansion made them (controller/experiment/groups.py)."""

    experiment: str = ""
    source: str = ""
    sha256: str = ""
    hosts: list[PlanHost] = []
    components: list[PlanComponent] = []
    schedule: list[PlanStep] = []
    clock: PlanClock | None = None
    streams: dict[str, PlanStream] = {}
    camp: PlanCamp | None = None
    packets: PlanPackets | None = None
    analysis: PlanAnalysis = msgspec.field(default_factory=PlanAnalysis)
    warnings: list[str] = []
    connect_deadline_s: float | None = None
    fan_out: int | None = None
    faults: list[PlanFault] = []
    links: list[PlanLink] = []
    groups: dict[str, list[str]] = {}
    component_groups: dict[str, list[str]] = {}

    def group_of(self, name: str) -> str | None:
        """The group a host or component is a member of (None: of none)."""
        for group, members in (*self.groups.items(), *self.component_groups.items()):
            if name in members:
                return group
        return None
