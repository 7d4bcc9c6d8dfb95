"""Stream sources: read datastream files (docs/stream-format.md) back into records.

A damaged chunk is skipped and the reader resynchronises on the next chunk marker; a file
cut short ends at its last whole chunk. Every loss travels with the records as a DS/lost
record counting what was lost, and is listed in `StreamReader.warnings`, so no sink can
miss it.
"""

from __future__ import annotations

import heapq
import json
import mmap
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgpack
import msgspec
from netspec.protocol.errors import StreamError

from .format import (
    CLOSE,
    DROPPED,
    FORMAT_VERSION,
    HEADER_MAGIC,
    NAMESPACE,
    SYNC,
    TRIGGER,
    chunk_crc,
)

_decode = msgspec.msgpack.decode


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


ADMIN = {DROPPED: _admin(DROPPED, "dropped"), TRIGGER: _admin(TRIGGER, "trigger"),
         CLOSE: _admin(CLOSE, "close")}
LOST = _admin(-1, "lost")


@dataclass(frozen=True)
class Source:
    """The file a record came from and its header."""

    path: Path
    header: dict[str, Any]

    def __getattr__(self, key: str) -> Any:
        try:
            return self.header[key]
        except KeyError:
            raise AttributeError(key) from None


class Record(NamedTuple):
    """One record. `ts` is when it was logged (an interval's end); `value` depends on the
    entity's kind: event extra data (decoded), interval duration ns, counter total,
    histogram {counts, sum}, samples {field: value}, admin and DS/lost details."""

    ts: int
    entity: EntityInfo
    tag: int | None
    value: Any
    start: int | None
    source: Source


class _Damaged(Exception):
    pass


def _uint(buf: bytes | mmap.mmap, o: int) -> tuple[int, int]:
    b = buf[o]
    if b <= 0x7F:
        return b, o + 1
    width = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}.get(b)
    if width is None or o + 1 + width > len(buf):
        raise _Damaged("bad integer")
    return int.from_bytes(buf[o + 1:o + 1 + width], "big"), o + 1 + width


def _bin_len(buf: bytes | mmap.mmap, o: int) -> tuple[int, int]:
    width = {0xC4: 1, 0xC5: 2, 0xC6: 4}.get(buf[o])
    if width is None or o + 1 + width > len(buf):
        raise _Damaged("bad body length")
    return int.from_bytes(buf[o + 1:o + 1 + width], "big"), o + 1 + width


Decoder = Callable[[Any], Any]


class DecoderRefused(LookupError):
    """A stream names a decoder that is not built in and that the user did not allow."""


def _decoder(name: str | None, allowed: Mapping[str, Decoder]) -> Decoder | None:
    """How an event's extra data is unpacked: None keeps the MessagePack value as is. A
    stream is data: the decoders it names are looked up in a fixed registry, or in
    `allowed` (the user's own, given on the command line or in the experiment file);
    nothing a file says is ever imported."""
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


def _records_list(body: bytes, count: int) -> list[Any]:
    records = _decode(body)
    if not isinstance(records, list) or len(records) != count:
        raise ValueError(f"not {count} records")
    return records


class StreamReader:
    """One stream file. Iterate it for its records, in the order they were logged.

    Raises:
        StreamError: the file is not a netspec datastream, or its format is newer than
            this reader's major version.
    """

    def __init__(self, path: str | Path, decoders: Mapping[str, Decoder] | None = None):
        self.path = Path(path)
        self.allowed_decoders = decoders or {}
        self.warnings: list[str] = []
        self.entities: dict[int, EntityInfo] = {}
        self.closed_cleanly: bool | None = None  # known once the records were read
        self.records_lost = 0
        self.duplicate_chunks = 0  # chunks whose sequence number came before: read once
        self._decoders: dict[int, Callable[[Any], Any] | None] = {}
        with open(self.path, "rb") as f:
            self._data: bytes | mmap.mmap = (mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                                              if self.path.stat().st_size else b"")
        self.header, self._body_at = self._read_header()
        self.source = Source(self.path, self.header)

    def _read_header(self) -> tuple[dict[str, Any], int]:
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        unpacker.feed(self._data[:64 * 1024])
        try:
            header = unpacker.unpack()
        except (msgpack.OutOfData, ValueError, msgpack.UnpackException):
            return self._header_lost("no header")
        if not isinstance(header, dict) or header.get("magic") != HEADER_MAGIC:
            return self._header_lost("bad header magic")
        version = tuple(header.get("version", (0, 0)))
        if version[0] > FORMAT_VERSION[0]:
            raise StreamError(str(self.path), f"stream format {version[0]}.{version[1]} is newer "
                              f"than this netspec reads ({FORMAT_VERSION[0]}.x); "
                              "upgrade netspec to read it")
        return header, unpacker.tell()

    def _header_lost(self, why: str) -> tuple[dict[str, Any], int]:
        """A damaged header: the chunks after it are read all the same, from the first chunk
        marker on; what the header said is taken from the file's name (stream.component.pid)."""
        at = self._data.find(SYNC)
        if at == -1:
            raise StreamError(str(self.path), f"not a netspec datastream ({why}, and no chunk in it)")
        stream, _, rest = self.path.stem.partition(".")
        self.warn(f"the header is damaged ({why}): read from the first chunk on, at byte {at}; "
                  f"stream and component taken from the file's name")
        return {"magic": HEADER_MAGIC, "version": list(FORMAT_VERSION), "stream": stream,
                "component": rest.rpartition(".")[0] or rest, "header_damaged": True}, at

    def __iter__(self) -> Iterator[Record]:
        last_ts = self.header.get("created_ns", 0)
        for seq, item in self.chunks():
            if seq is None:
                yield Record(last_ts, LOST, None, item, None, self.source)
                continue
            for record in self._records(item):
                last_ts = record.ts
                yield record
        if not self.closed_cleanly:
            self.closed_cleanly = False
            self.warn("no clean close record: the writer was killed or is still running "
                       "(records it still held in memory, at most one chunk, are not in the file)")

    def columns(self, compiled: bool = True) -> Iterator[tuple[int | None, Any]]:
        """`chunks` with each chunk's records as columns (columns.Columns): the merge's view.
        `compiled` decodes them with the compiled scanner, which loads numba on its first
        call (a process that reads records one by one, the daemon or `dump`, never does)."""
        from .columns import scan, unpack

        return self.chunks(scan if compiled else unpack)

    def chunks(self, decode: Callable[[bytes, int], Any] | None = None) -> Iterator[tuple[int | None, Any]]:
        """(seq, records) for every good chunk, in file order, and (None, {records,
        reason}) where something was lost. `decode(body, count)` makes the records of a
        chunk's body (default: a list of record lists); it raises ValueError if the body
        does not hold `count` records."""
        decode = decode or _records_list
        buf, o, last_seq = self._data, self._body_at, 0
        # A damaged header leaves the first chunk's number unknown: no gap is counted before it.
        ring = self.header.get("mode") == "ring"
        first = self.header.get("header_damaged", False)
        seen: set[int] = set()
        self.duplicate_chunks = 0
        while o < len(buf):
            try:
                seq, records, end = self._chunk_at(o, decode)
            except _Damaged as exc:
                o, loss, last_seq = self._resync(o, last_seq, ring, str(exc), decode)
                yield None, loss
                continue
            o = end
            if seq in seen:
                self.duplicate_chunks += 1
                continue
            seen.add(seq)
            if not ring and not first and seq > last_seq + 1:
                yield None, self._lost(None, f"chunks {last_seq + 1}-{seq - 1} missing")
            first = False
            last_seq = seq
            yield seq, records
        if self.duplicate_chunks:
            self.warn(f"{self.duplicate_chunks} chunk(s) appear more than once: each read once")

    def _chunk_at(self, o: int, decode: Callable[[bytes, int], Any]) -> tuple[int, Any, int]:
        buf = self._data
        if buf[o:o + len(SYNC)] != SYNC:
            raise _Damaged("no chunk marker")
        seq, p = _uint(buf, o + len(SYNC))
        count, p = _uint(buf, p)
        crc, p = _uint(buf, p)
        size, p = _bin_len(buf, p)
        if p + size > len(buf):
            raise _Damaged(f"file ends inside chunk {seq}")
        body = buf[p:p + size]
        if chunk_crc(seq, count, body) != crc:
            raise _Damaged(f"chunk {seq} fails its CRC")
        try:
            return seq, decode(body, count), p + size
        except ValueError:
            raise _Damaged(f"chunk {seq} holds other than its {count} records") from None

    def _resync(self, o: int, last_seq: int, ring: bool, why: str,
                decode: Callable[[bytes, int], Any]) -> tuple[int, dict[str, Any], int]:
        """Skip to the next chunk that reads whole. Returns where it is, what was lost, and
        the sequence number that chunk follows (so the gap is not counted twice)."""
        buf, at = self._data, o + 1
        while (at := buf.find(SYNC, at)) != -1:
            try:
                seq, *_ = self._chunk_at(at, decode)
            except _Damaged:
                at += 1
                continue
            if ring or seq == last_seq + 2:
                loss = self._lost(self._declared_count(o, last_seq + 1), f"{why}; skipped {at - o} bytes")
            else:
                loss = self._lost(None, f"{why}; chunks {last_seq + 1}-{seq - 1} lost ({at - o} bytes)")
            return at, loss, seq - 1
        return len(buf), self._lost(self._declared_count(o, last_seq + 1), f"{why}; the rest of the file "
                                    f"({len(buf) - o} bytes) is unreadable"), last_seq

    def _declared_count(self, o: int, seq: int) -> int | None:
        """The record count a damaged chunk's frame says it had, trusted only if the frame
        carries the sequence number expected there (in a ring stream, any)."""
        try:
            found, p = _uint(self._data, o + len(SYNC))
            count = _uint(self._data, p)[0]
        except (_Damaged, IndexError):
            return None
        ring = self.header.get("mode") == "ring"
        return count if ring or found == seq else None

    def _lost(self, records: int | None, reason: str) -> dict[str, Any]:
        self.records_lost += records or 0
        counted = f"lost {records} records" if records is not None else "lost an unknown number of records"
        self.warn(f"{counted}: {reason}")
        return {"records": records, "reason": reason}

    def warn(self, text: str) -> None:
        self.warnings.append(f"{self.path}: {text}")

    def _records(self, records: list[Any]) -> Iterator[Record]:
        for r in records:
            eid, ts = r[0], r[1]
            entity = self.entities.get(eid)
            if entity is not None:
                yield self._entity_record(entity, r)
            elif eid == NAMESPACE:
                self.declare(r)
            elif eid in ADMIN:
                yield self.admin_record(r)
            else:
                yield Record(ts, self.undeclared(eid), None, r[2:], None, self.source)

    def undeclared(self, eid: int) -> EntityInfo:
        """A stand-in for an entity whose namespace record was lost with a damaged chunk;
        said once, then known by it."""
        entity = self.entities[eid] = EntityInfo(eid, "unknown", "?", f"entity{eid}")
        self.warn(f"records of entity id {eid} whose namespace record was lost")
        return entity

    def declare(self, r: list[Any]) -> None:
        _, _, eid, kind, group, name, desc, decoder, spec = r[:9]
        self.entities[eid] = EntityInfo(eid, kind, group, name, desc, decoder, spec or {})
        try:
            self._decoders[eid] = _decoder(decoder, self.allowed_decoders)
        except (DecoderRefused, struct.error) as exc:
            self._decoders[eid] = None
            self.warn(f"{group}/{name}: decoder {decoder!r} unavailable ({exc}); extra data kept raw")

    def has_decoder(self, eid: int) -> bool:
        return self._decoders.get(eid) is not None

    def event_data(self, eid: int, data: Any) -> Any:
        """An event's extra data, unpacked by its entity's decoder."""
        decode = self._decoders.get(eid)
        return decode(data) if data is not None and decode is not None else data

    def _entity_record(self, e: EntityInfo, r: list[Any]) -> Record:
        kind, ts = e.kind, r[1]
        if kind == "event":
            return Record(ts, e, r[2], self.event_data(e.id, r[3] if len(r) > 3 else None), None,
                          self.source)
        if kind == "interval":
            return Record(ts, e, r[2], ts - r[3], r[3], self.source)
        if kind == "counter":
            return Record(ts, e, None, r[2], None, self.source)
        if kind == "histogram":
            return Record(ts, e, None, {"counts": r[2], "sum": r[3]}, None, self.source)
        if kind == "samples":
            return Record(ts, e, None, dict(zip(e.spec.get("fields", ()), r[2], strict=False)),
                          None, self.source)
        return Record(ts, e, None, r[2:], None, self.source)

    def admin_record(self, r: list[Any]) -> Record:
        eid, ts = r[0], r[1]
        if eid == DROPPED:
            value = {"records": r[2], "reason": r[3]}
            self.records_lost += r[2]
            self.warn(f"the writer dropped {r[2]} records ({r[3]})")
        elif eid == TRIGGER:
            value = {"reason": r[2], "chunks": r[3], "discarded_chunks": r[4]}
        else:
            self.closed_cleanly = True
            value = {"records": r[2], "chunks": r[3], "unwritten_ring_chunks": r[4]}
        return Record(ts, ADMIN[eid], None, value, None, self.source)


def read_streams(paths: Iterable[str | Path], readers: list[StreamReader] | None = None,
                 decoders: Mapping[str, Decoder] | None = None) -> Iterator[Record]:
    """The records of many files (one host's clock), merged by timestamp.

    Args:
        readers: if given, each file's StreamReader is appended to it, so the caller can
            look at its warnings and counts once the iteration is over.
    """
    opened = [StreamReader(p, decoders) for p in paths]
    if readers is not None:
        readers.extend(opened)
    return heapq.merge(*opened, key=lambda r: r.ts)
