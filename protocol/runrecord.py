"""run.json, the record a run leaves in its directory, as one typed structure: the controller
writes it (controller/record/rundir.py) and everyone reads it through `read_run` here, the
controller, `collect`, bundles, `report`, `ls`, `show`, the merge, clksync and the browser
alike. What a run's status and exit code are is decided by protocol/runoutcome.py.

run.json version history (readers accept every older version):
  1: first format (id, experiment, status, plan, programs, hosts, steps, components, error).
     Keys added since, each optional (a reader takes its absence as before): merge (why the
     run has no whole result set: --no-merge, or a merge interrupted), collected (what
     `ns_control collect` gathered: at, hosts, failed), error.gathered (a killed
     controller's run: whether collect gathered what its hosts held), share_hosts.
     Since the record is typed (msgspec), every key of the record, a step and a host is
     written (null where it has nothing to say) but for a participant's entry's and a step
     host's, left out at their defaults (a thousand hosts' entries per step); a key of the
     wrong type is refused naming where it is.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import msgpack
import msgspec

from . import ackjournal
from .errors import NetspecError

RUN_FORMAT = 1
# Each step's record as it ended, one JSON line each: a controller of a thousand hosts does
# not rewrite a megabytes-long run.json per step, and one killed mid-run still leaves every
# step it finished. run.json has them all once the run finished, and the journal goes (the
# ack journal too: protocol/ackjournal.py).
JOURNAL = "run.journal"
MERGED = "merged"  # the result set the merge makes of a run, under its directory


class Entry(msgspec.Struct, omit_defaults=True):
    """A participant's entry in a step: its ack as the controller received it (every `_ns`
    on its host's clock but `received_ns`, `start_ns` and `program_start_ns`, on the global
    timeline), and what became of it (`outcome`)."""

    status: str = ""  # ok, warning, error (protocol/messages.py)
    message: str = ""
    entered_ns: int | None = None  # when its daemon began the phase: None if it never acked
    acked_ns: int | None = None
    started_ns: int | None = None  # when the program began its callback (nodelib's stamp)
    start_ns: int | None = None  # entered_ns placed on the global timeline, +- start_bound_ns
    program_start_ns: int | None = None
    start_bound_ns: int | None = None
    release_at_ns: int | None = None  # a `release: at` instant on its host's clock
    release_bound_ns: int | None = None
    release_missed_ns: int | None = None
    release_unsynchronised: bool = False
    release_realtime_refused: bool = False
    received_ns: int | None = None
    # ok, error, late (acked after its k-of-n barrier opened), killed (ended at the deadline),
    # skipped (out of the run since an earlier step), ended (still in the step when the run failed)
    outcome: str | None = None
    traceback: str = ""
    late_ns: int | None = None
    died: bool = False  # its process died in the step (a k-of-n step fails over)


class StepHost(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A host's part in a step: its components' entries (always written), when the step was
    sent to it and when its last participant acked (on the controller's clock)."""

    components: dict[str, Entry]
    sent_ns: int | None = None
    done_ns: int | None = None


class Summarized(msgspec.Struct):
    """What a fan-out tree folded of a step's plain acks (their entries are in `hosts`)."""

    hosts: int = 0
    acks: int = 0
    slowest: list[list[Any]] = []  # [took_ns, host], slowest first


class Step(msgspec.Struct):
    """One step as it ran. `release` is controller/engine/release.py's (its mode, instant and
    skew)."""

    phase: str
    status: str  # running, ok, failed
    entered_ns: int | None = None
    hosts: dict[str, StepHost] = {}
    sent_ns: int | None = None  # a summarized step's: one instant for the first level
    left_ns: int | None = None
    duration_s: float | None = None
    release: dict[str, Any] = {}
    summarized: Summarized | None = None

    def participants(self) -> list[tuple[str, str, Entry]]:
        """Every (host, component, entry) of the step: those that acked and those that did
        not alike (a participant killed before its ack has no `entered_ns`)."""
        return [(host, name, entry) for host, part in self.hosts.items()
                for name, entry in part.components.items()]


class Controller(msgspec.Struct):
    """The controller that ran the run: a `running` run whose controller is gone was interrupted."""

    host: str = ""
    pid: int = 0
    pid_started: int | None = None  # clock ticks since boot: the pid's identity


class Salvage(msgspec.Struct, omit_defaults=True):
    """What was gathered of a host without its daemon (controller/gather/salvage.py): over
    what, from where on the host, the files (in the run directory) and their bytes, what was
    left on the host, whether the host's copy was removed, and why not all of it, if not."""

    via: str
    source: str = msgspec.field(default="", name="from")
    files: list[str] = []
    bytes: int = 0
    left: list[str] = []
    removed: bool = False
    error: str = ""


class Clock(msgspec.Struct):
    """A host's clock estimate at sync_clocks: its offset from the reference, a bound on it,
    how many recent exchanges it rests on, and their timestamps' source (kernel, user;
    reference for the reference host)."""

    offset_ns: int
    bound_ns: int
    exchanges: int
    source: str


class HostRecord(msgspec.Struct):
    """A host of the run: where its daemon was reached, its clock state at sync_clocks, its
    streams gathered, and what a salvage gathered without its daemon."""

    address: str = ""
    daemon_pid: int | None = None
    clock: Clock | None = None
    streams: list[str] = []
    salvaged: Salvage | None = None


class ComponentEnd(msgspec.Struct):
    """How a component's process ended."""

    returncode: int
    duration_s: float | None = None
    argv: list[str] = []
    ended_ns: int | None = None


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


class CutShort(msgspec.Struct, omit_defaults=True):
    """A journal's last entry, cut short by a kill: what it held is not in the record."""

    file: str
    bytes: int
    line: int | None = None  # run.journal's
    frame: int | None = None  # run.acks's
    step: int | None = None  # the step a frame cut short begins with, when that much was written


class RunRecord(msgspec.Struct, kw_only=True):
    """run.json. `plan` is the experiment as it ran (controller/experiment/model.py's
    `Plan.resolved`); `clksync` and `fan_out` what the engine says of clocks and the tree."""

    format: int
    id: str
    experiment: str
    status: str  # running, ok, partial, failed, interrupted: runoutcome.RunOutcome
    started: str = ""
    started_ns: int = 0
    ended: str | None = None
    ended_ns: int | None = None
    duration_s: float | None = None
    controller: Controller = msgspec.field(default_factory=Controller)
    experiment_sha256: str = ""
    plan: dict[str, Any] = {}
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
    campaign: dict[str, Any] | None = None  # the campaign's id and the point this run is of
    connect_deadline_s: float | None = None
    fan_out: dict[str, Any] | None = None
    clksync: dict[str, Any] | None = None
    cut_short: list[CutShort] = []

    @property
    def clock_reference(self) -> str | None:
        """The host whose clock is the run's global timeline, if clocks were synchronised."""
        return (self.plan.get("clock") or {}).get("reference")

    @property
    def pairs(self) -> dict[str, dict[str, Any]]:
        return (self.plan.get("analysis") or {}).get("pairs") or {}

    @property
    def decoders(self) -> list[str]:
        """The user's own decoders the experiment file allows (analysis: decoders:)."""
        return list((self.plan.get("analysis") or {}).get("decoders") or [])

    @property
    def graph(self) -> dict[str, dict[str, Any]]:
        return (self.plan.get("analysis") or {}).get("graph") or {}

    @property
    def host_names(self) -> list[str]:
        """The run's hosts as its experiment named them (or as it reached them)."""
        return [h["name"] for h in self.plan.get("hosts") or []] or sorted(self.hosts)

    @property
    def experiment_dir(self) -> Path:
        """Where the experiment file was: filters name their programs relative to it.

        Raises:
            KeyError: the record's plan does not say (a run.json netspec did not write).
        """
        return Path(self.plan["source"]).parent

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


class _Index(msgspec.Struct):
    index: int | None = None


class _Format(msgspec.Struct):
    format: int = 1


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(RunRecord)


def encode(record: RunRecord | Step) -> bytes:
    """A record (or a step) as it is written: compact JSON (a long run's run.json is megabytes;
    `ns_control show` or jq are for reading it)."""
    return _ENCODER.encode(record)


def journal_line(index: int, step: Step) -> bytes:
    """Step `index` as a line of the journal: the step's JSON object led by its index."""
    return b'{"index":%d,' % index + encode(step)[1:] + b"\n"


def decode(data: bytes, where: str) -> RunRecord:
    """A run.json's bytes as the typed record.

    Raises:
        NetspecError: naming `where`, when it is not JSON, not a run record (a key of the
            wrong type, named with its place), or of a format newer than this netspec reads.
    """
    try:
        version = msgspec.json.decode(data, type=_Format).format
    except msgspec.ValidationError as exc:
        raise NetspecError(f"{where}: not a run record: {exc}") from None
    except msgspec.DecodeError as exc:
        raise NetspecError(f"{where}: not a JSON object ({exc})") from None
    if version > RUN_FORMAT:
        raise NetspecError(f"{where} has format {version}; this netspec reads up to {RUN_FORMAT}: "
                           "upgrade netspec")
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        if "missing required field `format`" in str(exc):  # the first records did not say
            return msgspec.convert({**msgspec.json.decode(data), "format": 1}, RunRecord)
        raise NetspecError(f"{where}: not a run record: {exc}") from None


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
    _with_journal(run, record)
    fold_acks(run, record)
    return record


def _with_journal(run: Path, record: RunRecord) -> None:
    """Add to `record` the steps the journal has and run.json has not (saved before they ended)."""
    try:
        lines = (run / JOURNAL).read_bytes().splitlines()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise NetspecError(f"{run}/{JOURNAL}: unreadable ({exc})") from exc
    steps = record.steps = list(record.steps)
    for number, line in enumerate(lines, 1):
        try:
            index = msgspec.json.decode(line, type=_Index).index
            entry = msgspec.json.decode(line, type=Step)
        except msgspec.ValidationError as exc:  # a DecodeError too: JSON, but not a step
            raise NetspecError(f"{run}/{JOURNAL}:{number}: not a step ({exc})") from None
        except msgspec.DecodeError:
            if number == len(lines):  # the last line, cut short by a kill
                record.note_cut_short(CutShort(JOURNAL, len(line), line=number))
                break
            raise NetspecError(f"{run}/{JOURNAL}:{number}: not a JSON line") from None
        if index is None or not 0 <= index <= len(steps):
            raise NetspecError(f"{run}/{JOURNAL}:{number}: step index {index!r} does not follow "
                               f"the {len(steps)} steps before it")
        if index == len(steps):
            steps.append(entry)
        elif entry.left_ns is not None and steps[index].left_ns is None:
            steps[index] = entry  # its end, where run.json was saved while it ran


def fold_acks(run: Path, record: RunRecord) -> None:
    """Put every ack of the run's ack journal (protocol/ackjournal.py), if it has one, in its
    step of `record`. An entry the step has already (recorded as itself) stays as it is.

    Raises:
        NetspecError: naming the file and the frame, when a frame is malformed.
    """
    try:
        data = (run / ackjournal.ACK_JOURNAL).read_bytes()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise NetspecError(f"{run}/{ackjournal.ACK_JOURNAL}: unreadable ({exc})") from exc
    steps = record.steps
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(data)
    # A frame cut short by a kill is the file's end: the unpacker stops before it.
    number = read = 0
    for number, item in enumerate(unpacker, 1):
        read = unpacker.tell()  # after the loop, a frame cut short may have moved it on
        try:
            index, received, records, *encoding = item
            if not (isinstance(index, int) and 0 <= index < len(steps) and isinstance(received, int)
                    and isinstance(records, bytes) and encoding in ([], [ackjournal.ZLIB])):
                raise ValueError("not [step index, received_ns, records(, zlib)] of a step in run.json")
            step = steps[index]
            if not step.hosts:
                step.hosts = {}
            for host, component, entry in ackjournal.entries(records, bool(encoding)):
                info = step.hosts.setdefault(host, StepHost(components={}))
                if component not in info.components:
                    info.components[component] = msgspec.convert(
                        {**entry, "received_ns": received, "outcome": "ok"}, Entry)
                info.done_ns = max(info.done_ns or 0, received)
                if info.sent_ns is None:
                    info.sent_ns = step.sent_ns
        except (TypeError, ValueError, msgspec.ValidationError) as exc:
            raise NetspecError(f"{run}/{ackjournal.ACK_JOURNAL}: frame {number}: {exc}") from None
    if read < len(data):
        record.note_cut_short(CutShort(ackjournal.ACK_JOURNAL, len(data) - read, frame=number + 1,
                                       step=ackjournal.step_of(data[read:])))


def controller_gone(record: RunRecord) -> bool:
    """Whether the run says `running` while its controller, on this machine, has ended (its
    pid gone or reused): such a run was interrupted, whatever run.json still says."""
    controller = record.controller
    if record.status != "running" or controller.host != socket.gethostname() or not controller.pid:
        return False
    started = controller.pid_started
    return started is None or process_start(controller.pid) != started


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot): a pid's identity, reused or not."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None
