"""The stream record schema, declared once: the header's keys, and every kind of record a
stream holds with its items in order and their types (docs/stream-format.md, Records).

A record is a MessagePack array led by an entity id and a time. Each kind here is a msgspec
Struct encoded as an array (`array_like`), so a record on disk is exactly its fields' values
in this order; a stream's own records carry their id as the Struct's tag, which msgspec
writes first. The writer builds its records from these Structs (or, on the entities' hot
path, tuples in their order, which tests/datastream/test_schema.py holds to them), the
reader finds and checks each item by its place here (`at`), and the merge's integer columns
are the places where an entity record may hold an integer (`INT_ITEMS`).
"""

# Version history: the stream format's, in format.py (1.0: these records, as declared here;
# 1.1: the operation record; a histogram's spec may say `scale: log`).

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any

import msgspec

from .format import CLOSE, DROPPED, FIRST_ENTITY_ID, NAMESPACE, TRIGGER

# The types of items.
Time = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]  # ns since the epoch, as an int64 column holds it
Int64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]
Count = Annotated[int, msgspec.Meta(ge=0)]
EntityId = Annotated[int, msgspec.Meta(ge=FIRST_ENTITY_ID, le=(1 << 63) - 1)]
Number = int | float


class Header(msgspec.Struct):
    """The file's first object, a map (a writer may add keys of its own after these; a
    reader ignores them). The writer says every key; a reader gets a key the file leaves
    out, or says with a value of another type, as its default here: "" for a text, 0 for a
    number (pid and created_ns included), None for parent_pid, "normal" for the mode."""

    magic: str
    version: Annotated[list[int], msgspec.Meta(min_length=2)]  # [major, minor]
    stream: str = ""
    run: str = ""
    host: str = ""
    component: str = ""
    pid: int = 0
    parent_pid: int | None = None  # set in a forked child
    clock: str = ""
    created_ns: Time = 0
    mode: str = "normal"  # "normal" or "ring"
    ring_chunks: int = 0
    chunk_records: int = 0

    @property
    def ring(self) -> bool:
        return self.mode == "ring"


class StreamRecord(msgspec.Struct, array_like=True, tag_field="id"):
    """A stream's own record: its id (below FIRST_ENTITY_ID) is its tag, written first."""


class NamespaceRecord(StreamRecord, tag=NAMESPACE):
    """Declares entity `entity`: `spec` is {lo, hi, buckets} for a histogram, {fields} for
    samples."""

    ts: Time
    entity: EntityId
    kind: str
    group: str
    name: str
    desc: str | None
    decoder: str | None
    spec: dict[Any, Any] | None


class DroppedRecord(StreamRecord, tag=DROPPED):
    """The writer dropped `records` records (a write failed, or they were not MessagePack)."""

    ts: Time
    records: Count
    reason: str


class TriggerRecord(StreamRecord, tag=TRIGGER):
    """A ring stream's trigger: the `chunks` chunks before it are the ring's contents."""

    ts: Time
    reason: str
    chunks: Count
    discarded_chunks: Count


class CloseRecord(StreamRecord, tag=CLOSE):
    """A clean close: `records` records in `chunks` chunks were written before it."""

    ts: Time
    records: Count
    chunks: Count
    unwritten_ring_chunks: Count


class EventRecord(msgspec.Struct, array_like=True):
    """Something happened; `data` (any MessagePack value) is left out when there is none."""

    id: EntityId
    ts: Time
    tag: Int64
    data: Any = None


class IntervalRecord(msgspec.Struct, array_like=True):
    """An elapsed time, logged at its end `ts`."""

    id: EntityId
    ts: Time
    tag: Int64
    start: Time


OUTCOMES = ("ok", "failed", "timeout", "unknown")
"""An operation's outcomes, by the code its record holds: answered as asked; refused or in
error; given up at the program's deadline; sent and never answered (it may have been done)."""


class OperationRecord(msgspec.Struct, array_like=True):
    """An operation, logged at its end `ts` with its `outcome` (OUTCOMES' index, where an
    event's tag is): `start` is the instant its latency counts from (a pacer's intended
    instant, or its actual start where none was intended), `lag` how much later than that
    it actually started (ns, 0 without a pacer), `cause` a short text, left out for none."""

    id: EntityId
    ts: Time
    outcome: Annotated[int, msgspec.Meta(ge=0, lt=len(OUTCOMES))]
    start: Time
    lag: Count
    cause: str | None = None


class CounterRecord(msgspec.Struct, array_like=True):
    """A counter's running total when logged."""

    id: EntityId
    ts: Time
    total: Number


class HistogramRecord(msgspec.Struct, array_like=True):
    """`counts`: buckets + 2 (below lo, the bins of [lo, hi), at or above hi); `sum` of the values."""

    id: EntityId
    ts: Time
    counts: list[Count]
    sum: Number


class SamplesRecord(msgspec.Struct, array_like=True):
    """One value per field the namespace record's spec names."""

    id: EntityId
    ts: Time
    values: list[Any]



class ProbeRecord(msgspec.Struct, array_like=True):
    """The audit's probe (netspec.links.probes), the data of a `LINKS/probe` event that the
    receiving host logs at the kernel's receive stamp: the host `src` sent probe `seq` to
    `dst` at `sent_ns` (the sender's clock, stamped just before the send, so the link's
    shaping lies between the two), it came in at `recv_ns` (this host's clock, the
    kernel's stamp), `size` bytes of UDP payload. The sender logs each probe it sends as a
    `LINKS/sent` event, tag `seq`, data `SentRecord`: a probe sent and never received was lost.
    An event's data, not a sixth kind of entity record: the merge carries it as every
    event's (events.parquet's `data`), and analysis/links.py decodes it with this form."""

    src: str
    dst: str
    seq: Count
    sent_ns: Time
    recv_ns: Time
    size: Count


class SentRecord(msgspec.Struct, array_like=True):
    """A probe sent: to host `dst`, probe `seq`, at `sent_ns` (the event's time too)."""

    dst: str
    seq: Count
    sent_ns: Time
    size: Count


class ProbeCounts(msgspec.Struct):
    """What a host's audit probes did in the run, the data of the one `LINKS/counts` event
    it logs at their end (netspec.links.probes): probes sent, received, refused at its own
    egress (a partition's), failed to send; TCP probes made, failed, refused. A map, as it
    always was; analysis/links.py reads `refused`."""

    sent: Count = 0
    received: Count = 0
    refused: Count = 0
    send_errors: Count = 0
    tcp_probed: Count = 0
    tcp_failed: Count = 0
    tcp_refused: Count = 0


class TcpProbeRecord(msgspec.Struct, array_like=True):
    """The audit's TCP probe of the link to host `dst` (netspec.links.tcpprobes), the data of
    a `LINKS/tcp` event its sender logs at the probe's start: how long (ns) its connect took,
    its request in two writes till the answer, and its burst of `burst_bytes` till the peer
    said all arrived; a part not done is None, and `error` says what failed."""

    dst: str
    connect_ns: Count | None
    request_ns: Count | None
    burst_ns: Count | None
    burst_bytes: Count
    error: str | None = None


# Every kind of record, by the stream record's id or the entity's kind.
STREAM_RECORDS: dict[int, type[StreamRecord]] = {
    NAMESPACE: NamespaceRecord, DROPPED: DroppedRecord, TRIGGER: TriggerRecord, CLOSE: CloseRecord}
ENTITY_RECORDS: dict[str, type[msgspec.Struct]] = {
    "event": EventRecord, "interval": IntervalRecord, "operation": OperationRecord, "counter": CounterRecord,
    "histogram": HistogramRecord, "samples": SamplesRecord}


def name_of(kind: type[msgspec.Struct]) -> str:
    """A stream record's name: `close` for CloseRecord."""
    return kind.__name__.removesuffix("Record").lower()


def items(kind: type[msgspec.Struct]) -> tuple[str, ...]:
    """The names of a record's items, in the order a file holds them (`id` first)."""
    fields = kind.__struct_fields__
    return ("id", *fields) if kind.__struct_config__.tag is not None else fields


def at(kind: type[msgspec.Struct], item: str) -> int:
    """Where item `item` of a record of `kind` is in its array."""
    return items(kind).index(item)


def item_type(kind: type[msgspec.Struct], item: str) -> Any:
    """The declared type of item `item` of a record of `kind`."""
    return next(f.type for f in msgspec.structs.fields(kind) if f.name == item)


def required(kind: type[msgspec.Struct]) -> int:
    """How many items a record of `kind` has at least (a trailing item with a default may
    be left out)."""
    tagged = kind.__struct_config__.tag is not None
    return tagged + len(kind.__struct_fields__) - len(kind.__struct_defaults__)


def _holds_int(t: msgspec.inspect.Type) -> bool:
    if isinstance(t, msgspec.inspect.UnionType):
        return any(_holds_int(u) for u in t.types)
    return isinstance(t, msgspec.inspect.IntType)


def int_items(kinds: Iterable[type[msgspec.Struct]]) -> int:
    """How many leading items the merge reads as integer columns: up to the last place
    where a record of one of `kinds` holds an integer."""
    last = 0
    for kind in kinds:
        for f in msgspec.inspect.type_info(kind).fields:
            if _holds_int(f.type):
                last = max(last, at(kind, f.name))
    return last + 1


INT_ITEMS = int_items(ENTITY_RECORDS.values())
HEADER_ITEMS = {f.name: f.type for f in msgspec.structs.fields(Header)}
