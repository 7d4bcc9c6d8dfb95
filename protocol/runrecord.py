"""run.json, the record a run leaves in its directory, as one typed structure: the controller
writes it (controller/record/rundir.py) and everyone reads it through `read_run` here, the
controller, `collect`, bundles, `report`, `ls`, `show`, the merge, clksync and the browser
alike. What a run's status and exit code are is decided by protocol/runoutcome.py.

run.json version history (readers accept every older version):
  1: first format (id, experiment, status, plan, programs, hosts, steps, components, error).
     Keys added since, each optional (a reader takes its absence as before): merge (why the
     run has no whole result set: --no-merge, or a merge interrupted), collected (what
     `ns_control collect` gathered: at, hosts, failed), error.gathered (a killed
     controller's run: whether collect gathered what its hosts held), share_hosts, a host's
     links (what its kernel offers link conditions, and where each went), a step's links
     (the link conditions its release changed, by host: protocol/runstep.py's LinkChange),
     the plan's links and each plan step's links and link_state.
     Since the record is typed (msgspec), every key of the record, a step and a host is
     written (null where it has nothing to say) but for a participant's entry's and a step
     host's, left out at their defaults (a thousand hosts' entries per step); a key of the
     wrong type is refused naming where it is. The plan is typed too (protocol/runplan.py):
     a record with none says so where a command needs it (`collect`, `rerun`).
     A host's `placement` (where a container host ran: engine, node, container, image,
     limits, cgroup; null for other hosts) was added since.
     Later optional keys: faults (the schedule's faults as they went, with their audit),
     components' scheduled (ended by a fault of the schedule), plan.faults.
     Later optional key: leftovers (what the run's start found that runs whose controller died
     left in its Docker engines, collected and removed: controller/engine/leftovers.py; and
     copies of the long-term key an older netspec stored on its SSH hosts, removed).
     Same keys, kept since: a later `collect` adds to a host's `salvaged` (its files are
     every collect's) and leaves `collected.at` when it gathers nothing more.
     Later optional key: a host's `salvaged.swept` (what the next netspecd started on an
     `address:` host ended of the run its SIGKILLed daemon left, as `collect` was told).
     Faults are one per entry of the file since (a partition's directions in its `parts`; an
     older record's, a fault per direction, read as they are); a fault's `role`,
     `holder` and `claimed_ns` (a target chosen at run time) were added.
     Later optional keys: the plan's hosts' `kubernetes` (a pod per host), and a placement of
     kind `kubernetes` with its `context`: then engine is the cluster's API server, node the
     pod's node, container and container_id the pod's name and uid, network its namespace.
"""

from __future__ import annotations

import socket
from enum import StrEnum
from pathlib import Path
from typing import Any

import msgspec

from . import runjournal
from .errors import NetspecError
from .kinds import Clock
from .links import Backends, LinkOffer
from .runjournal import JOURNAL, journal_line
from .runplan import PlanPair, PlanRecord
from .runstep import CutShort, Entry, LinkChange, Release, Spread, Step, StepHost, Summarized
from .versioned import decode_versioned

__all__ = [
    "JOURNAL",
    "MERGED",
    "RUN_FORMAT",
    "CampaignPoint",
    "Clock",
    "ClockSync",
    "Collected",
    "ComponentEnd",
    "Controller",
    "CutShort",
    "Entry",
    "FanOutTree",
    "HostLinks",
    "HostRecord",
    "Limits",
    "LinkChange",
    "Placement",
    "Program",
    "Release",
    "RunError",
    "RunRecord",
    "RunStatus",
    "Salvage",
    "Spread",
    "Step",
    "StepHost",
    "Summarized",
    "controller_gone",
    "decode",
    "encode",
    "fold_acks",
    "journal_line",
    "process_start",
    "read_run",
]

RUN_FORMAT = 1


class RunStatus(StrEnum):
    """A run's status words, as run.json says them (protocol/runoutcome.py decides which a run
    has). A str enum: a member is its word, so run.json's bytes are as before, and a record's
    `status` is read as the word it holds (a campaign's `setup failed`, an older netspec's)."""

    OK = "ok"
    PARTIAL = "partial"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    RUNNING = "running"

MERGED = "merged"  # the result set the merge makes of a run, under its directory


class Controller(msgspec.Struct):
    """The controller that ran the run: a `running` run whose controller is gone was interrupted."""

    host: str = ""
    pid: int = 0
    pid_started: int | None = None  # clock ticks since boot: the pid's identity


class Salvage(msgspec.Struct, omit_defaults=True):
    """What was gathered of a host without its daemon (controller/gather/salvage.py): over
    what, from where on the host, the files (in the run directory) and their bytes, what was
    left on the host, whether the host's copy was removed, and why not all of it, if not;
    what a later daemon on the host ended of the run its dead one left (`swept`)."""

    via: str
    source: str = msgspec.field(default="", name="from")
    files: list[str] = []
    bytes: int = 0
    left: list[str] = []
    removed: bool = False
    error: str = ""
    swept: list[str] = []

    def after(self, earlier: Salvage | None) -> Salvage:
        """This salvage of a host as the record keeps it after `earlier`'s (a second
        `ns_control collect`): the files and bytes gathered by both; the files left on the
        host as this one found them if it reached the host (`via`: what it gathered is left
        no more), beside those the earlier left and removed with the host's copy (gone for
        good), else as the earlier found them; the host's copy removed if either removed it;
        why not all of it, as this one found it."""
        if earlier is None:
            return self
        left = self.left if self.via else earlier.left
        if self.via and earlier.removed:
            left = _union(earlier.left, self.left)
        return Salvage(self.via or earlier.via, self.source or earlier.source,
                       _union(earlier.files, self.files), earlier.bytes + self.bytes,
                       left, self.removed or earlier.removed, self.error,
                       _union(earlier.swept, self.swept))  # a daemon tells it once


def _union(first: list[str], then: list[str]) -> list[str]:
    return [*first, *(item for item in then if item not in first)]


class HostLinks(msgspec.Struct):
    """A host's link conditions (netspec.links): what its kernel offers them, found at launch,
    and the backend of each part of every condition the run asks of it, by peer."""

    offer: LinkOffer
    placements: dict[str, Backends] = {}


class Limits(msgspec.Struct, omit_defaults=True):
    """What a container host may use, as its engine was asked (None: no limit): CPUs (the
    engine's nano_cpus / 1e9), memory in bytes, and the capabilities added."""

    cpus: float | None = None
    memory_bytes: int | None = None
    cap_add: list[str] = []


class Placement(msgspec.Struct, omit_defaults=True):
    """Where a container host ran (controller/hosts/docker.py): its engine (the address
    netspec reached it at, `local` for this machine's socket), the engine's node name and
    its id, the container (id, name, whether netspec created it for the run), its image
    (the name asked for and the digest found), the run's network, its limits, and its
    cgroup (the path under the node's cgroup hierarchy, and its version)."""

    engine: str
    node: str = ""
    engine_id: str = ""
    container_id: str = ""
    container: str = ""
    created: bool = False
    image: str = ""
    image_id: str = ""
    network: str = ""
    limits: Limits = msgspec.field(default_factory=Limits)
    cgroup: str = ""
    cgroup_version: int | None = None
    kind: str = "docker"  # or "kubernetes": then engine is the cluster's API server, node the
    # pod's node, container_id its uid, container its name, network its namespace
    context: str = ""  # a pod's: the kubeconfig's context that reached its cluster


class HostRecord(msgspec.Struct):
    """A host of the run: where its daemon was reached, its clock state at sync_clocks, its
    streams gathered, what a salvage gathered without its daemon, its link conditions'
    backends, and where a container host was placed (None for other hosts)."""

    address: str = ""
    daemon_pid: int | None = None
    clock: Clock | None = None
    streams: list[str] = []
    salvaged: Salvage | None = None
    links: HostLinks | None = None
    placement: Placement | None = None


class ComponentEnd(msgspec.Struct):
    """How a component's process ended."""

    returncode: int
    duration_s: float | None = None
    argv: list[str] = []
    ended_ns: int | None = None
    scheduled: bool = False  # a fault of the schedule ended it: its outcome is "killed by schedule"
    # Its end was a failure: no one asked for it nor awaited it (a death mid-run, a SIGKILL
    # from outside), in step `step` where its daemon said which (protocol/exits.py's FAILED).
    failed: bool = False
    step: int | None = None


class Program(msgspec.Struct):
    """A program the run started, kept in the run directory (`copy`) with its sha256."""

    sha256: str
    copy: str


class RunError(msgspec.Struct):
    """Why a run is not ok: its error (`type` the exception's name, or Partial,
    Interrupted), the phase it stopped in (None: before the first step, or none for a
    partial run), and each cause said once."""

    type: str
    message: str
    phase: str | None = None
    causes: list[str] = []
    gathered: bool | None = None  # a killed controller's run: whether collect gathered its hosts' files


class Collected(msgspec.Struct):
    """What `ns_control collect` gathered: when, from how many hosts, and what failed where."""

    at: str
    hosts: int
    failed: dict[str, str] = {}


class ClockSync(msgspec.Struct, kw_only=True):
    """How the run's clocks were synchronised (controller/engine/clocks.py): the reference
    host, how many hosts probe it, the interval asked and the one they probe at (longer
    where the reference's budget of exchanges per second asks it), and this controller's
    offset from the reference with its bound (where the step's times go on the global
    timeline)."""

    reference: str
    probers: int
    asked_interval_ms: float
    interval_ms: float
    reference_budget_per_s: float
    controller_offset_ns: int | None = None
    controller_offset_bound_ns: int | None = None


class FanOutTree(msgspec.Struct):
    """The fan-out tree steps went through (controller/engine/fanout.py): children per host
    at most, levels, hosts that relay, and the first level."""

    width: int
    depth: int
    relays: int
    first: list[str] = []


class CampaignPoint(msgspec.Struct):
    """The campaign a run is of (controller/campaigns/campaign.py): its id, the point's
    parameter values, and which repetition of the point the run is (from 0)."""

    id: str
    point: dict[str, Any] = {}
    repetition: int = 0


class FaultPart(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One direction of a partition or heal (`host` -> `peer`, done by the host it leaves)
    and its audit, every instant on the global timeline as FaultRecord's: when its host did
    it, +- `bound_ns`; its effect (a partition's first packet dropped, a heal's first
    through) and when; a timed partition's end and its first packet through after it; what
    it measured (`apply_s`: how long its rule's change took)."""

    host: str
    peer: str
    done_ns: int | None = None
    bound_ns: int | None = None
    unsynchronised: bool = False
    effect: str = ""
    effect_ns: int | None = None
    ended_ns: int | None = None
    through_ns: int | None = None
    measured: dict[str, float] = {}
    error: str = ""
    unfinished: bool = False


class FaultRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A fault of the schedule as it went (controller/engine/faults.py), one per entry of the
    file's `faults:` (`index`, its place there), and its audit: the instant planned on the
    global timeline, when its host did it (`done_ns`, `late_ns` after the plan, +- `bound_ns`:
    its host's clock bound; `unsynchronised`: that host had no clock estimate, the instant
    was taken on its own clock), the effect its daemon observed and when (`effect_ns`,
    `effect_after_ns` after the fault was done, on that host's clock alone: no bound between
    them; a partition's: its first packet dropped, a heal's: its first through), a
    pressure's or a timed pause's or partition's end (`ended_ns`; `through_ns`: that
    partition's first packet through after it), what a pressure measured, and what went
    wrong (`error`: not done, or no effect seen). `unfinished`: its host's last report did not
    come (the run ended while the fault still lasted, or looked for its effect).

    A partition or heal is done per direction (`parts`, each with its own audit): `host` is
    the hosts of its first side, `target` the others'; it is done once every direction is
    (the last one's instant), its effect the first of theirs. A fault aimed at a `role` took
    the component (or, isolating it, the host) that held it at its instant: `target` and
    `host` are the ones chosen, `holder` the component that held it, `claimed_ns` when its
    claim was made (None: not chosen, `error` says why)."""

    index: int
    kind: str
    target: str
    host: str
    role: str | None = None
    holder: str | None = None
    claimed_ns: int | None = None
    phase: str | None = None
    after_s: float = 0.0
    planned_ns: int | None = None
    done_ns: int | None = None
    late_ns: int | None = None
    bound_ns: int | None = None
    unsynchronised: bool = False
    effect: str = ""
    effect_ns: int | None = None
    effect_after_ns: int | None = None
    ended_ns: int | None = None
    through_ns: int | None = None
    measured: dict[str, float] = {}
    error: str = ""
    unfinished: bool = False
    parts: list[FaultPart] = []

    def directions(self) -> list[tuple[str, str]]:
        """What it was done to, as (host, target) pairs: each direction of a partition or
        heal, else its one host and target."""
        return [(p.host, p.peer) for p in self.parts] if self.parts else [(self.host, self.target)]

    def part(self, host: str, target: str) -> FaultPart | None:
        """Its direction from `host` to `target`; None if it has no such part."""
        return next((p for p in self.parts if (p.host, p.peer) == (host, target)), None)


class RunRecord(msgspec.Struct, kw_only=True):
    """run.json. `plan` is the experiment as it ran (protocol/runplan.py, made by
    controller/experiment/model.py's `Plan.resolved`); its steps are protocol/runstep.py's."""

    format: int
    id: str
    experiment: str
    status: str  # a RunStatus (or a word of another netspec's): runoutcome.RunOutcome decides it
    started: str = ""
    started_ns: int = 0
    ended: str | None = None
    ended_ns: int | None = None
    duration_s: float | None = None
    controller: Controller = msgspec.field(default_factory=Controller)
    experiment_sha256: str = ""
    plan: PlanRecord | None = None  # None: a record made without one (tests, benches)
    hosts: dict[str, HostRecord] = {}
    steps: list[Step] = []
    components: dict[str, ComponentEnd] = {}  # host/component -> how it ended
    versions: dict[str, str] = {}
    programs: dict[str, Program] = {}  # the program's path as the experiment named it -> its copy
    error: RunError | None = None
    merge: str | None = None  # why the run has no whole result set, if it has none
    collected: Collected | None = None
    collected_ns: int | None = None
    share_hosts: bool = False
    rerun_of: str | None = None
    campaign: CampaignPoint | None = None
    connect_deadline_s: float | None = None
    fan_out: FanOutTree | None = None
    clksync: ClockSync | None = None
    cut_short: list[CutShort] = []
    faults: list[FaultRecord] = []  # the schedule's faults as they went, in the order planned
    # What its start found left, and did of it: dead runs' containers in its engines, copies of
    # the long-term key an older netspec stored on its SSH hosts.
    leftovers: list[str] = []

    @property
    def clock_reference(self) -> str | None:
        """The host whose clock is the run's global timeline, if clocks were synchronised."""
        return self.plan.clock.reference if self.plan and self.plan.clock else None

    @property
    def pairs(self) -> dict[str, PlanPair]:
        return self.plan.analysis.pairs if self.plan else {}

    @property
    def decoders(self) -> list[str]:
        """The user's own decoders the experiment file allows (analysis: decoders:)."""
        return list(self.plan.analysis.decoders) if self.plan else []

    @property
    def graph(self) -> dict[str, dict[str, Any]]:
        return self.plan.analysis.graph if self.plan else {}

    @property
    def host_names(self) -> list[str]:
        """The run's hosts as its experiment named them (or as it reached them)."""
        return [h.name for h in self.plan.hosts] if self.plan and self.plan.hosts else sorted(self.hosts)

    def planned(self, where: Path) -> PlanRecord:
        """The run's plan, where a command needs it (`collect`, `rerun`).

        Raises:
            NetspecError: naming `where` (the run directory), when its run.json has no plan
                (a record netspec's controller did not write).
        """
        if self.plan is None or not self.plan.source:
            raise NetspecError(f"{where}/run.json has no plan (the experiment as it ran): "
                               "it was not written by ns_control run")
        return self.plan

    def note_cut_short(self, said: CutShort) -> None:
        """Say that a journal's last entry was cut short by a kill (once, however often the
        record is read): what it held is not in the record."""
        if said not in self.cut_short:
            self.cut_short = [*self.cut_short, said]

    def cut_short_texts(self) -> list[str]:
        """What the record says of its journals' last entries cut short by a kill."""
        texts = []
        for cut in self.cut_short:
            if cut.line is not None:
                texts.append(f"cut short by a kill: {cut.file} line {cut.line} ({cut.bytes} bytes): "
                             "a step's record as it was then is not in this record")
                continue
            which = (f", step {cut.step} '{self.steps[cut.step].phase}'"
                     if cut.step is not None and 0 <= cut.step < len(self.steps) else "")
            texts.append(f"cut short by a kill: {cut.file} frame {cut.frame} "
                         f"({cut.bytes} bytes{which}): the acks it held are not in this record")
        return texts


_ENCODER = msgspec.json.Encoder()


def encode(record: RunRecord | Step) -> bytes:
    """A record (or a step) as it is written: compact JSON (a long run's run.json is megabytes;
    `ns_control show` or jq are for reading it)."""
    return _ENCODER.encode(record)


def decode(data: bytes, where: str) -> RunRecord:
    """A run.json's bytes as the typed record (Raises: NetspecError, as `decode_versioned`)."""
    return decode_versioned(data, where, RunRecord, RUN_FORMAT, "run record")


def read_run(run: Path) -> RunRecord:
    """The record of the run directory `run`: run.json with the steps of its journal and the
    acks of its ack journal (a run still going, or whose controller was killed).

    Raises:
        NetspecError: naming the file, when run.json is missing, unreadable, not a run record,
            or of a format newer than this netspec reads, or a journal is malformed.
    """
    try:
        data = (run / "run.json").read_bytes()
    except OSError as exc:
        raise NetspecError(f"{run}: no readable run.json ({exc})") from exc
    record = decode(data, f"{run}/run.json")
    record.steps = list(record.steps)
    if said := runjournal.fold_steps(run, record.steps):
        record.note_cut_short(said)
    fold_acks(run, record)
    return record


def fold_acks(run: Path, record: RunRecord) -> None:
    """Put every ack of the run's ack journal (protocol/runjournal.py), if it has one, in
    its step of `record`, and say a last frame cut short by a kill.

    Raises:
        NetspecError: naming the file and the frame, when a frame is malformed.
    """
    if said := runjournal.fold_acks(run, record.steps):
        record.note_cut_short(said)


def controller_gone(record: RunRecord) -> bool:
    """Whether the run says `running` while its controller, on this machine, has ended (its
    pid gone or reused): such a run was interrupted, whatever run.json still says."""
    controller = record.controller
    if record.status != RunStatus.RUNNING or controller.host != socket.gethostname() or not controller.pid:
        return False
    started = controller.pid_started
    return started is None or process_start(controller.pid) != started


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot): a pid's identity, reused or not."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None
