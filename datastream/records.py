"""A stream's records as their kinds give them form (the forms declared in schema.py): what
a namespace record declares, each entity record checked against its kind, and the decoders
of an event's data. A file's bytes are data: a record whose items do not have its kind's
form is refused (`Malformed`) and counted by the reader, never passed on to crash a sink.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from .format import CLOSE, DROPPED, TRIGGER
from .schema import (
    ENTITY_RECORDS,
    OUTCOMES,
    STREAM_RECORDS,
    CounterRecord,
    EventRecord,
    Header,
    HistogramRecord,
    IntervalRecord,
    NamespaceRecord,
    OperationRecord,
    SamplesRecord,
    at,
    item_type,
    items,
    name_of,
    required,
)

KINDS = tuple(ENTITY_RECORDS)
INT64 = range(-(1 << 63), 1 << 63)
# Where an item of a record's columns is absent or not an integer (nil, a float, a
# container, a string): below every int64 a record may carry in its place (columns.py, and
# the compiled scanner, which imports it from here, not through columns.py).
MISSING = INT64.start
TIMES = range(0, 1 << 63)  # ns since the epoch, as an int64 column holds them
MAX_BUCKETS = 1 << 20


def fits(value: Any, kind: Any) -> bool:
    try:
        msgspec.convert(value, kind)
    except msgspec.ValidationError:
        return False
    return True


def holds_close(records: Any) -> bool:
    """Whether a chunk's records (a list, or columns.Columns) hold a clean close record."""
    ids = getattr(records, "ints", None)
    if ids is not None:
        return bool((ids[:, 0] == CLOSE).any())
    return any(type(r) is list and len(r) > 1 and r[0] == CLOSE for r in records)


class Malformed(ValueError):
    """A record whose items do not have the form its kind asks for."""


@dataclass(frozen=True)
class EntityInfo:
    """An entity as a stream's namespace record declared it."""

    id: int
    kind: str
    group: str
    name: str
    desc: str = ""
    decoder: str | None = None
    spec: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def full_name(self) -> str:
        return f"{self.group}/{self.name}"


def _admin(eid: int, name: str) -> EntityInfo:
    return EntityInfo(eid, "admin", "DS", name)


ADMIN = {eid: _admin(eid, name_of(STREAM_RECORDS[eid])) for eid in (DROPPED, TRIGGER, CLOSE)}
LOST = _admin(-1, "lost")


@dataclass(frozen=True)
class Source:
    """The file a record came from and its header, as the file's reader decoded it."""

    path: Path
    header: Header


class Record(NamedTuple):
    """One record. `ts` is when it was logged (an interval's end); `value` depends on the
    entity's kind: event extra data (decoded), interval duration ns, an operation's
    {outcome, latency_ns, lag_ns, cause} (`start` the instant its latency counts from), counter total,
    histogram {counts, sum}, samples {field: value}, admin and DS/lost details."""

    ts: int
    entity: EntityInfo
    tag: int | None
    value: Any
    start: int | None
    source: Source


def is_int(v: Any) -> bool:
    return type(v) is int  # not a bool


def is_number(v: Any) -> bool:
    return type(v) is int or type(v) is float


def is_finite(v: Any) -> bool:
    return type(v) is int or (type(v) is float and math.isfinite(v))


def head(r: Any) -> tuple[int, int]:
    """(entity id, ts) of a record: an array led by two integers, the time an int64 >= 0."""
    if type(r) is not list or len(r) < 2 or not is_int(r[0]) or not is_int(r[1]):
        raise Malformed("not an array led by an entity id and a time")
    if r[1] not in TIMES or r[0] not in INT64:  # as the merge's int64 columns hold them
        raise Malformed("an entity id or a time out of range")
    return r[0], r[1]


_NAMESPACE_ITEMS = required(NamespaceRecord)
_ENTITY = at(NamespaceRecord, "entity")
_ENTITY_ID = item_type(NamespaceRecord, "entity")


def declared(r: list[Any]) -> EntityInfo:
    """The entity a namespace record (schema.NamespaceRecord) declares. Raises Malformed if
    it has not that form."""
    if len(r) < _NAMESPACE_ITEMS:
        raise Malformed(f"a namespace record of fewer than {_NAMESPACE_ITEMS} items")
    eid = r[_ENTITY]
    if not fits(eid, _ENTITY_ID):
        raise Malformed(f"a namespace record declares id {eid!r}, not an entity's")
    try:
        ns = msgspec.convert(r, NamespaceRecord)
    except msgspec.ValidationError:
        raise Malformed(f"a namespace record of entity id {eid} whose items are not text") from None
    kind, group, name, spec = ns.kind, ns.group, ns.name, ns.spec or {}
    if kind == "histogram" and not (is_finite(spec.get("lo")) and is_finite(spec.get("hi"))
                                    and spec["lo"] < spec["hi"] and is_int(spec.get("buckets"))
                                    and 1 <= spec["buckets"] <= MAX_BUCKETS):
        raise Malformed(f"histogram {group}/{name}: spec {spec!r} is not {{lo, hi, buckets}}")
    if kind == "histogram" and (spec.get("scale", "linear") not in ("linear", "log")
                                or (spec.get("scale") == "log" and not spec["lo"] > 0)):
        raise Malformed(f"histogram {group}/{name}: spec {spec!r} is neither linear nor log with lo > 0")
    if kind == "samples" and not (isinstance(spec.get("fields"), list)
                                  and all(isinstance(f, str) for f in spec["fields"])):
        raise Malformed(f"samples {group}/{name}: spec {spec!r} names no fields")
    return EntityInfo(eid, kind, group, name, ns.desc or "", ns.decoder, spec)


# Where each entity record's items are (schema.py): the reader takes them from here.
TAG = at(EventRecord, "tag")
DATA = at(EventRecord, "data")
START = at(IntervalRecord, "start")
OUTCOME, OP_START = at(OperationRecord, "outcome"), at(OperationRecord, "start")
LAG, CAUSE = at(OperationRecord, "lag"), at(OperationRecord, "cause")
TOTAL = at(CounterRecord, "total")
COUNTS, SUM = at(HistogramRecord, "counts"), at(HistogramRecord, "sum")
VALUES = at(SamplesRecord, "values")


def tag_of(r: list[Any]) -> int | None:
    """A record's tag: the integer the program logged with it; None if it logged another kind
    of value (the merge's int64 column cannot hold it either)."""
    return r[TAG] if is_int(r[TAG]) and r[TAG] in INT64 else None


def entity_value(e: EntityInfo, r: list[Any]) -> tuple[int | None, Any, int | None]:
    """(tag, value, start) of the record `r` of entity `e`, its event data still raw.
    Raises Malformed if `r` has not the form of `e`'s kind."""
    kind, ts = e.kind, r[1]
    if kind == "event":
        if len(r) <= TAG:
            raise Malformed(f"event {e.full_name} without a tag")
        return tag_of(r), r[DATA] if len(r) > DATA else None, None
    if kind == "interval":
        if len(r) <= START or not is_int(r[START]) or r[START] not in TIMES:
            raise Malformed(f"interval {e.full_name} without a start time")
        return tag_of(r), ts - r[START], r[START]
    if kind == "operation":
        if len(r) <= LAG or not is_int(r[OUTCOME]) or not 0 <= r[OUTCOME] < len(OUTCOMES) \
                or not is_int(r[OP_START]) or r[OP_START] not in TIMES or not is_int(r[LAG]) or r[LAG] < 0 \
                or (len(r) > CAUSE and r[CAUSE] is not None and type(r[CAUSE]) is not str):
            raise Malformed(f"operation {e.full_name} without an outcome, a start, a lag and a text cause")
        cause = r[CAUSE] if len(r) > CAUSE else None
        return r[OUTCOME], {"outcome": OUTCOMES[r[OUTCOME]], "latency_ns": ts - r[OP_START], "lag_ns": r[LAG],
                            "cause": cause}, r[OP_START]
    if kind == "counter":
        if len(r) <= TOTAL or not is_number(r[TOTAL]):
            raise Malformed(f"counter {e.full_name} without a numeric total")
        return None, r[TOTAL], None
    if kind == "histogram":
        counts = r[COUNTS] if len(r) > max(COUNTS, SUM) else None
        if type(counts) is not list or len(counts) != e.spec["buckets"] + 2 \
                or not all(is_int(c) and c >= 0 for c in counts) or not is_number(r[SUM]):
            raise Malformed(f"histogram {e.full_name} whose counts are not {e.spec['buckets'] + 2} "
                            "integers and a sum")
        return None, {"counts": counts, "sum": r[SUM]}, None
    if kind == "samples":
        if len(r) <= VALUES or type(r[VALUES]) is not list:
            raise Malformed(f"samples {e.full_name} without their values")
        return None, dict(zip(e.spec["fields"], r[VALUES], strict=False)), None
    return None, r[2:], None  # a kind a newer minor version added: its items as they are


def admin_value(r: list[Any]) -> dict[str, Any]:
    """The value of a stream record (dropped, trigger, close) as a map of its items past
    the time, named as schema.py declares them. Raises Malformed if it has not its form."""
    kind = STREAM_RECORDS[r[0]]
    try:
        record = msgspec.convert(r, kind)
    except msgspec.ValidationError:
        raise Malformed(f"a stream record {ADMIN[r[0]].name} whose items are not its own") from None
    return {k: getattr(record, k) for k in items(kind)[2:]}


Decoder = Callable[[Any], Any]


class DecoderRefused(LookupError):
    """A stream names a decoder that is not built in and that the user did not allow."""


def decoder_for(name: str | None, allowed: Mapping[str, Decoder]) -> Decoder | None:
    """How an event's extra data is unpacked: None keeps the MessagePack value as is. A
    stream is data: the decoders it names are looked up in a fixed registry, or in
    `allowed` (the user's own, given on the command line or in the experiment file);
    nothing a file says is ever imported.

    Raises:
        DecoderRefused: the name is neither built in nor allowed.
        struct.error: a `struct:` format that does not compile.
    """
    if name in (None, "", "msgpack"):
        return None
    if name == "utf8":
        return lambda d: d.decode() if isinstance(d, bytes) else d
    if name == "json":
        return json.loads
    if name.startswith("struct:"):
        unpack = struct.Struct(name[len("struct:"):]).unpack
        return lambda d: unpack(d)
    if name in allowed:
        return allowed[name]
    raise DecoderRefused("not built in, and not allowed (pass it with --decoder, or list it in the "
                         "experiment's analysis: decoders:)")
