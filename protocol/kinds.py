"""Every message of the control protocol as a msgspec Struct: what each kind carries, and
of which types. A frame is decoded into its Struct once, where it is read (reading.py's
`Reader`, which channel.py applies from the seal on), so nothing downstream checks a field
again; a message that does not fit is refused there, naming its kind and the field.

On the wire each is the msgpack map it always was, "t" naming its kind: a field at its
default is left out (`omit_defaults`) where the maps left out what they did not say, and
a field this netspec does not know is skipped (an older or newer peer's); a reply, an exit
and a setup's streams and camp say every field, as their maps did. docs/protocol.md
describes each kind. The daemon <-> component socketpair's maps are not declared here
(daemon/componentchannel.py and nodelib/phases.py check them; an ack as `ComponentAck`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from .hostfacts import HostFacts
from .links import Backends, LinkOffer, LinkRule
from .messages import (
    ACK,
    ACK_ERROR,
    ACK_OK,
    ACK_WARNING,
    ACKS,
    CLAIM,
    CLKSYNC,
    END,
    ENTER,
    ERROR,
    EXIT,
    FILES,
    HELLO,
    JOIN,
    LEFT,
    LINKS,
    MAX_ROLE,
    NODE,
    OUTPUT,
    READ,
    READ_LIMIT,
    REPLY,
    RESET,
    ROLE_PATTERN,
    SETUP,
    SHUTDOWN,
    TREE,
    error_map,
)
from .packets import PacketsSpec

# A request's own bound: a day is longer than any step a controller asks for.
MAX_TIMEOUT_S = 86_400.0
# clksync's probe interval, as a probe client takes it: a stretched fleet's is minutes at most.
MAX_PROBE_INTERVAL_MS = 3_600_000.0
# A step's deadline: ten years is longer than any (a soak test's is days); infinity and NaN
# would be a timer asyncio cannot set.
MAX_DEADLINE_S = 10 * 365 * 86_400.0
JOIN_TOKEN_BYTES = 16  # a run's join token: what a parent in its tree shows to join it

Status = Literal["ok", "warning", "error"]
Seconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_TIMEOUT_S)]
Count = Annotated[int, msgspec.Meta(ge=0)]
Port = Annotated[int, msgspec.Meta(gt=0, lt=65536)]
Mark = tuple[int, str]  # [start_ns or took_ns, "host/component" or host]
assert Status.__args__ == (ACK_OK, ACK_WARNING, ACK_ERROR)  # type: ignore[attr-defined]


class _Map(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A map on the wire: fields at their defaults are left out."""


class ComponentSpec(_Map, kw_only=True):
    """A component as the controller's experiment model sends it in `setup` and the daemon
    runs it: `program` (with `args`) names a NETSPEC-aware program, `argv` a plain command.
    One declaration for both sides: a field added here reaches the daemon."""

    name: str
    program: str | None = None
    args: list[str] = []
    argv: list[str] = []  # the plain command; the daemon fills in an aware program's own
    params: dict[str, Any] = {}
    env: dict[str, str] = {}
    start: str = "launch"
    stop: str | None = None
    # How long it may sit idle, asked to stop, before SIGKILL; None: the daemon's STOP_GRACE_S.
    stop_grace_s: float | None = None

    def __post_init__(self) -> None:
        if self.name == NODE:
            raise ValueError(f"a component may not be named {NODE!r}: that is the daemon's own name in "
                             "node-wide steps; rename the component")
        if self.program is None and not self.argv:
            raise ValueError(f"component {self.name!r} has neither a program nor an argv")

    @property
    def aware(self) -> bool:
        return self.program is not None


# -- controller -> daemon: requests ---------------------------------------------------------


class Request(_Map, tag_field="t"):
    """What every request may carry: an id to answer (none: one-way, `enter`), and a bound
    on its handling."""

    id: int | None = None
    timeout_s: Seconds | None = None


class Hello(Request, tag=HELLO, kw_only=True):
    pass


# The stream writer's defaults (datastream/format.py's, pinned equal by a test: protocol
# imports nothing above it).
STREAM_CHUNK_RECORDS = 4096
STREAM_FLUSH_MS = 100
# The camp sampler's interval bounds (experiment.schema.json's): it runs at real-time
# priority, and slots shorter than a sample would keep it on its core.
CAMP_INTERVAL_MS = (1.0, 60_000.0)


class StreamSpec(msgspec.Struct, kw_only=True):
    """One stream of `setup`, as the experiment file's `streams:` section describes it
    (datastream/writer.py's StreamConfig is built from it). Every field goes on the wire."""

    enable: list[str] = []
    disable: list[str] = []
    ring_chunks: Count = 0
    trigger: list[str] = []
    chunk_records: Annotated[int, msgspec.Meta(ge=1)] = STREAM_CHUNK_RECORDS
    flush_ms: Count = STREAM_FLUSH_MS
    components: list[str] | None = None


class CampSpec(msgspec.Struct, kw_only=True):
    """What the camp sampler samples (None: everything there is); daemon/sampler.py's
    CampConfig is built from it. Every field goes on the wire."""

    interval_ms: Annotated[float, msgspec.Meta(ge=CAMP_INTERVAL_MS[0], le=CAMP_INTERVAL_MS[1])] = 100.0
    interfaces: list[str] | None = None
    disks: list[str] | None = None
    processes: list[str] | None = None


class Setup(Request, tag=SETUP, kw_only=True):
    run: str  # checked where it becomes a path (names.safe_name)
    host: str = ""
    components: list[ComponentSpec] = []
    streams: dict[str, StreamSpec] | None = None
    camp: CampSpec | None = None
    packets: PacketsSpec | None = None  # the `packets:` service here (daemon/packets.py), if asked
    join_token: Annotated[bytes, msgspec.Meta(min_length=JOIN_TOKEN_BYTES)] | None = None
    share: bool = False


class Participant(_Map, kw_only=True):
    """One component in a step's enter, with the step's parameters for it."""

    name: str
    params: dict[str, Any] = {}


class Enter(Request, tag=ENTER, kw_only=True):
    """A step: `components` for this host, or in a fan-out tree `hosts` (each host's index
    in `lists`, the distinct lists of components)."""

    phase: str
    step: Count
    components: list[Participant] = []
    hosts: dict[str, int] | None = None
    lists: list[list[Participant]] | None = None
    deadline_s: Annotated[float, msgspec.Meta(ge=0, le=MAX_DEADLINE_S)] | None = None
    release_ns: int | None = None
    summarize: bool = False
    published: dict[str, Any] = {}

    def __post_init__(self) -> None:
        if self.hosts is None:
            return
        lists = self.lists or []
        wrong = [h for h, i in self.hosts.items() if not 0 <= i < len(lists)][:5]
        if wrong:
            raise ValueError(f"hosts {wrong} name no list of `lists` ({len(lists)} of them)")


class End(Request, tag=END, kw_only=True):
    component: str


class Reset(Request, tag=RESET, kw_only=True):
    clean: bool = False


class Files(Request, tag=FILES, kw_only=True):
    pass


class Read(Request, tag=READ, kw_only=True):
    path: str
    offset: Count = 0
    size: Count = READ_LIMIT


class Clksync(Request, tag=CLKSYNC, kw_only=True):
    """The probe server of the run (`serve`), or a probe client of it (`probe`)."""

    role: Literal["serve", "probe"]
    key: bytes
    timestamps: str = "kernel"
    peer: str | None = None
    address: str | None = None
    port: Port | None = None
    interval_ms: Annotated[float, msgspec.Meta(ge=1, le=MAX_PROBE_INTERVAL_MS)] | None = None

    def __post_init__(self) -> None:
        missing = [k for k in ("peer", "address", "port", "interval_ms") if getattr(self, k) is None]
        if self.role == "probe" and missing:
            raise ValueError(f"a probe needs {', '.join(missing)}")


class Shutdown(Request, tag=SHUTDOWN, kw_only=True):
    clean: bool = False


class Child(_Map, kw_only=True):
    """A child in a fan-out tree: its host, where to reach it, its subtree's hosts, and the
    key its daemon holds for the run if it is not the parent's own (a container's)."""

    host: str
    address: tuple[str, Port]
    hosts: list[str]
    key: bytes | None = None


class Tree(Request, tag=TREE, kw_only=True):
    children: list[Child]


class Join(Request, tag=JOIN, kw_only=True):
    run: str
    host: str
    token: bytes


FAULT = "fault"  # a fault of the experiment's schedule (controller -> daemon), and its report back
COMPONENT_FAULTS = ("kill", "terminate", "restart", "start", "pause", "resume")
PRESSURE_FAULTS = ("cpu", "memory", "disk")
LINK_FAULTS = ("partition", "heal")
DAEMON_FAULTS = ("kill_daemon",)
FAULT_KINDS = (*COMPONENT_FAULTS, *PRESSURE_FAULTS, *LINK_FAULTS, *DAEMON_FAULTS)


class Fault(Request, tag=FAULT, kw_only=True):
    """A fault of the schedule, done on this host at `at_ns` of the reference clock
    (daemon/faults.py): to `component` (kill, terminate, restart, start, pause, resume), to the host
    itself (cpu, memory, disk pressure, for `for_s`, of `size` bytes or `workers` busy
    processes; kill_daemon, its daemon killed), or to the direction from this host to `rule`'s
    peer (partition: cut on top of its conditions, for `for_s` if given; heal: that cut
    lifted, its conditions as they are then), never
    conditioning netspec's own ports (`exclude_tcp`, `exclude_udp`, as `Links`').
    `index` is its place in the plan's `faults`; a pause with `for_s` is resumed after it."""

    index: Count
    fault: Literal["kill", "terminate", "restart", "start", "pause", "resume", "cpu", "memory", "disk",
                   "partition", "heal", "kill_daemon"]
    at_ns: int
    component: str | None = None
    for_s: Annotated[float, msgspec.Meta(gt=0, le=MAX_TIMEOUT_S)] | None = None
    size: Annotated[int, msgspec.Meta(gt=0, le=1 << 40)] | None = None
    workers: Annotated[int, msgspec.Meta(gt=0, le=256)] | None = None
    rule: LinkRule | None = None
    exclude_tcp: list[Port] = []
    exclude_udp: list[Port] = []

    def __post_init__(self) -> None:
        if (self.fault in COMPONENT_FAULTS) != (self.component is not None):
            needs = "needs" if self.fault in COMPONENT_FAULTS else "takes no"
            raise ValueError(f"a {self.fault} fault {needs} component")
        if (self.fault in LINK_FAULTS) != (self.rule is not None):
            needs = "needs" if self.fault in LINK_FAULTS else "takes no"
            raise ValueError(f"a {self.fault} fault {needs} rule")
        if self.fault in PRESSURE_FAULTS and self.for_s is None:
            raise ValueError(f"a {self.fault} fault needs for_s")
        if self.fault in ("memory", "disk") and self.size is None:
            raise ValueError(f"a {self.fault} fault needs size")


class Links(Request, tag=LINKS, kw_only=True):
    """The run's link conditions from this host toward others (netspec.links): each rule
    replaces its peer's condition (an empty one clears it). `check`: only say where each would
    go (every condition the run will ask of the host, sent at launch), or refuse naming what
    is missing; nothing changes. netspec's own ports are never conditioned: TCP `exclude_tcp`
    (SSH's, the daemons') and UDP `exclude_udp` (clksync's)."""

    rules: list[LinkRule]
    check: bool = False
    exclude_tcp: list[Port] = []
    exclude_udp: list[Port] = []


class Left(Request, tag=LEFT, kw_only=True):
    """What the daemon, at its start, ended of run `run`, whose daemon had died on this host
    holding it (daemon/leftovers.py): asked by `ns_control collect`, once."""

    run: str


REQUESTS = (Hello | Setup | Enter | End | Reset | Files | Read | Clksync | Shutdown | Tree | Join | Links
            | Fault | Left)


# -- daemon -> controller: events, acks and their summaries ---------------------------------


class Event(_Map, tag_field="t"):
    pass


class WireError(_Map, kw_only=True):
    """An error as it crosses the wire (never pickled): its exception's type and message,
    its traceback (messages.error_map's, cut to fit a frame), and where it happened when
    the sender says."""

    type: str = "Error"
    message: str = ""
    traceback: str = ""
    host: str | None = None
    phase: str | None = None


def wire_error(exc: BaseException) -> WireError:
    """`exc` as it crosses the wire (messages.error_map's type, message and traceback)."""
    return WireError(**error_map(exc))


class ErrorEvent(Event, tag=ERROR, kw_only=True):
    """An error: the answer to request `id`, or (none) an event of its own."""

    error: WireError
    id: int | None = None


class Output(Event, tag=OUTPUT, kw_only=True):
    component: str
    stream: Literal["stdout", "stderr"]
    data: bytes


class Exit(Event, tag=EXIT, kw_only=True, omit_defaults=False):
    """A component's process ended; every field goes on the wire, in the order the
    daemon's map before typed messages had them."""

    component: str
    returncode: int
    argv: list[str]
    duration_s: float
    expected: bool = False
    forced: bool = False  # an older daemon's exit does not say
    ended_ns: int
    failed: bool
    scheduled: bool = False  # a fault of the schedule killed or terminated it: its end is that fault's
    # The step it ended in (inside that phase's callback, or a plain command run to its end by
    # its start step); None between phases, and from an older daemon.
    step: int | None = None


class Release(_Map, kw_only=True):
    """How a step's `release: at` instant went on a host: the instant on its clock and how
    far off it may be, how late the step reached it, and the flags of what went wrong."""

    at_ns: int | None = None
    bound_ns: int | None = None
    missed_ns: Count = 0
    unsynchronised: bool = False
    realtime_refused: bool = False


class ComponentAck(_Map, kw_only=True):
    """What a component says in its ack to its daemon (any language, any netspec)."""

    status: Status
    message: str = ""
    traceback: str = ""
    files: list[str] = []
    published: dict[str, Any] = {}
    started: int | None = None  # the program's own start of its callback (nodelib stamps it)
    ended: int | None = None


class Clock(msgspec.Struct):
    """A host's clock estimate at sync_clocks: its offset from the reference, a bound on it,
    how many recent exchanges it rests on, and their timestamps' source (kernel, user;
    reference for the reference host). The run record keeps it as it came
    (runrecord.HostRecord.clock)."""

    offset_ns: int
    bound_ns: int
    exchanges: int
    source: str


class Ack(Event, ComponentAck, tag=ACK, kw_only=True):
    """One participant's ack of a step: the component's own (ComponentAck) and what its
    daemon adds: when it entered and acked, its clock then, the release, and for a launch
    the phases the component registered, for sync_clocks the clock estimate. In a fan-out
    tree's batch each names its `host`."""

    step: Count
    component: str
    entered: int
    acked: int
    entry_clock: tuple[int, int] | None = None  # [offset_ns, bound_ns] from the reference at entry
    release: Release | None = None
    phases: list[str] | None = None
    clock: Clock | None = None
    host: str | None = None
    scheduled: bool = False  # the schedule's fault ended it before or in this step: not its failure
    # It had ended already, in that earlier step (its Exit's `step`): this error ack is that
    # end's news, judged there even if it comes before the exit (through a fan-out tree).
    ended_in: int | None = None


class Summary(msgspec.Struct, kw_only=True):
    """A fan-out tree's plain acks folded (acksummary.AckSummary.wire). Every field goes on
    the wire, at its default too: a relay or controller of netspec before typed messages
    needs each of them."""

    acks: Count
    hosts: Count
    starts: Count
    records: bytes
    slowest: list[Mark] = []
    first: Mark | None = None
    last: Mark | None = None
    low: int | None = None
    high: int | None = None
    programs: tuple[Count, Mark | None, Mark | None, int | None, int | None] = (0, None, None, None, None)
    unplaced: list[str] = []
    missed: dict[str, int] = {}
    unsynchronised: list[str] = []
    realtime_refused: list[str] = []
    zlib: bool = False

    def __post_init__(self) -> None:
        if self.starts and None in (self.first, self.last, self.low, self.high):
            raise ValueError("its starts have no ends")
        if self.programs[0] and None in self.programs[1:]:
            raise ValueError("its programs' starts have no ends")


class Acks(Event, tag=ACKS, kw_only=True):
    """A batch of a fan-out tree's acks, each as itself, and the summary of the plain ones."""

    step: Count
    acks: list[Ack]  # on the wire however few: a controller before typed messages needs it
    summary: Summary | None = None


class ReplyFrame(Event, tag=REPLY, kw_only=True):
    """The answer to request `id`: its fields are the request's reply type's, decoded by
    the one who asked (reading.reply), who alone knows what was asked."""

    id: int
    body: bytes = b""  # the frame's own body, not a field on the wire


class FaultDone(Event, tag=FAULT, kw_only=True):
    """A fault of the schedule as it went on its host (daemon/faults.py), every instant on
    that host's clock: the instant it was due (`at_ns`, converted with the clock estimate of
    `offset_ns` +- `bound_ns` from the reference; `unsynchronised`: taken as it was), when it
    was done and how late the request came for it, the effect the daemon observed and when
    (a killed component's exit, a paused process seen stopped in /proc), what a pressure
    measured (`measured`: cpu_s, rss_bytes, written_bytes), and what went wrong (`error`).
    A fault that lasts (a timed pause or partition, a pressure, a partition's or heal's look
    for its first packet) is reported once done and again at its end: `final` only then;
    `through_ns`: a timed partition's first packet through after its end."""

    index: Count
    kind: str
    target: str
    at_ns: int
    done_ns: int | None = None
    offset_ns: int | None = None
    bound_ns: int | None = None
    unsynchronised: bool = False
    missed_ns: Count = 0
    effect: str = ""
    effect_ns: int | None = None
    ended_ns: int | None = None  # a pressure's (or a timed pause's) end
    through_ns: int | None = None
    measured: dict[str, float] = {}
    error: str = ""
    final: bool = True


class Claimed(Event, tag=CLAIM, kw_only=True):
    """A component's claim of a role (nodelib.claim), or its letting go (`held` False), at
    `at_ns` of its host's clock, with that host's clock estimate then (`offset_ns` +-
    `bound_ns` from the reference; `unsynchronised`: none, the instant as it was taken)."""

    component: str
    role: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ROLE, pattern=ROLE_PATTERN)]
    held: bool = True
    at_ns: int
    offset_ns: int | None = None
    bound_ns: int | None = None
    unsynchronised: bool = False


EVENTS = ReplyFrame | ErrorEvent | Output | Exit | Ack | Acks | FaultDone | Claimed
# What a parent in a fan-out tree reads from a child: its join's answer, its batches, its errors.
FROM_CHILD = ReplyFrame | ErrorEvent | Acks


# -- replies ----------------------------------------------------------------------------------


class Reply(Event, tag=REPLY, kw_only=True, omit_defaults=False):
    """The answer to request `id`, as the daemon sends it, its fields beside the id: a reply
    with nothing the controller reads, and the base of each that has. Every field goes on
    the wire (the maps the daemon sent before typed messages said each)."""

    id: int | None = None


class HelloReply(Reply, kw_only=True):
    protocol: int
    pid: int
    facts: HostFacts
    now_ns: int | None = None


class SetupReply(Reply, kw_only=True):
    root: str


class EnterReply(Reply, kw_only=True):
    accepted: Count  # the participants it takes


class EndReply(Reply, kw_only=True):
    returncode: int | None
    forced: bool


class FileEntry(_Map, kw_only=True, omit_defaults=False):
    component: str | None
    name: str
    path: str
    missing: bool = False
    size: Count


class FilesReply(Reply, kw_only=True):
    files: list[FileEntry]


class ReadReply(Reply, kw_only=True):
    data: bytes
    eof: bool


class ClksyncReply(Reply, kw_only=True):
    port: Port | None = None


class ResetReply(Reply, kw_only=True):
    killed: Count  # the run's processes it ended


class TreeReply(Reply, kw_only=True):
    children: Count  # the children it joined


class LinksReply(Reply, kw_only=True):
    """What the host offers, where each peer's condition goes (peer -> Backends), and for an
    applied change when it began and when it was in effect (this host's clock) with the
    host's clock estimate then ((offset, bound) ns from the reference, None before clksync)."""

    offer: LinkOffer
    placements: dict[str, Backends] = {}
    began_ns: int | None = None
    applied_ns: int | None = None
    clock: tuple[int, int] | None = None


class LeftReply(Reply, kw_only=True):
    """`swept`: this daemon's start ended what run's dead daemon (`pid`) left, at `at_ns`,
    each thing `removed` said for people; not `swept`: it found nothing of the run left."""

    swept: bool
    pid: int | None = None
    at_ns: int | None = None
    removed: list[str] = []


REPLIES: dict[str, type[Reply]] = {HELLO: HelloReply, SETUP: SetupReply, ENTER: EnterReply, END: EndReply,
                                   FILES: FilesReply, READ: ReadReply, CLKSYNC: ClksyncReply,
                                   RESET: ResetReply, TREE: TreeReply, LINKS: LinksReply, LEFT: LeftReply}
