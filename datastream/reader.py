"""Stream sources: read datastream files (docs/stream-format.md) back into records.

The chunks come checked from datastream.chunkfile (damage skipped, a file cut short ended
at its last whole chunk); here each chunk's records become Records: a record whose items do
not have its kind's form (datastream.records) is skipped. Every loss travels with the
records as a DS/lost record counting what was lost, and is listed in `StreamReader.warnings`,
so no sink can miss it. No byte string makes the reader raise but StreamError, for a file
that is not a stream.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .chunkfile import ChunkFile
from .format import CLOSE, DROPPED, NAMESPACE
from .records import (
    ADMIN,
    DATA,
    LOST,
    START,
    TAG,
    Decoder,
    DecoderRefused,
    EntityInfo,
    Malformed,
    Record,
    Source,
    admin_value,
    declared,
    decoder_for,
    entity_value,
    head,
)

__all__ = ["ADMIN", "LOST", "Decoder", "DecoderRefused", "EntityInfo", "Malformed", "Record",
           "Source", "StreamReader", "read_streams"]

_TIME_END, _INT_MIN = 1 << 63, -(1 << 63)


class StreamReader(ChunkFile):
    """One stream file. Iterate it for its records, in the order they were logged.

    Lifecycle: a ChunkFile's (datastream.chunkfile): opening reads the header; each pass
    over the records (iterating, or `chunks`, `columns`) maps the file and unmaps it when
    the pass ends, is closed or is dropped, so a reader holds no map and no file between
    passes, nor after one read to its end. `close` ends a pass still running. Use it as a
    context manager all the same, so a pass left half read is ended where the block ends:

        with StreamReader(path) as reader:
            records = list(reader)

    Raises:
        StreamError: the file is not a netspec datastream, or its format is newer than
            this reader's major version.
    """

    def __init__(self, path: str | Path, decoders: Mapping[str, Decoder] | None = None):
        self.allowed_decoders = decoders or {}
        self.entities: dict[int, EntityInfo] = {}
        self.undecodable: dict[str, list[Any]] = {}  # entity -> [events, first error]
        self._decoders: dict[int, Callable[[Any], Any] | None] = {}
        self._finished = False
        super().__init__(path)
        self.source = Source(self.path, self.header)

    def __iter__(self) -> Iterator[Record]:
        last_ts = self.header.created_ns
        entities, source = self.entities, self.source
        tag_at, start_at, data_at = TAG, START, DATA  # locals: the loop below runs per record
        for seq, item in self.chunks():
            if seq is None:
                yield Record(last_ts, LOST, None, item, None, self.source)
                continue
            malformed: dict[str, int] = {}
            for r in item:
                # The commonest forms, an event without data and an interval, are checked
                # here inline (a call per record costs a third of the reading); `record`
                # checks every form, these too.
                # Items are where schema.py puts them: the tag at TAG (events and intervals
                # alike), an interval's start at START, an event's data after its tag.
                if type(r) is list and len(r) > tag_at and type(r[0]) is int and type(ts := r[1]) is int \
                        and 0 <= ts < _TIME_END and (e := entities.get(r[0])) is not None:
                    tag = r[tag_at] if type(r[tag_at]) is int and _INT_MIN <= r[tag_at] < _TIME_END else None
                    if e.kind == "event" and len(r) == data_at:
                        last_ts = ts
                        yield Record(ts, e, tag, None, None, source)
                        continue
                    if e.kind == "interval" and len(r) > start_at and type(r[start_at]) is int \
                            and 0 <= r[start_at] < _TIME_END:
                        last_ts = ts
                        yield Record(ts, e, tag, ts - r[start_at], r[start_at], source)
                        continue
                try:
                    record = self.record(r)
                except Malformed as exc:
                    malformed[str(exc)] = malformed.get(str(exc), 0) + 1
                    continue
                if record is not None:
                    last_ts = record.ts
                    yield record
            if malformed:
                yield Record(last_ts, LOST, None, self.malformed(seq, malformed), None, self.source)
        self.finish()

    def columns(self, compiled: bool = True) -> Iterator[tuple[int | None, Any]]:
        """`chunks` with each chunk's records as columns (columns.Columns): the merge's view.
        `compiled` decodes them with the compiled scanner, which loads numba on its first
        call (a process that reads records one by one, the daemon or `dump`, never does)."""
        from .columns import scan, unpack

        return self.chunks(scan if compiled else unpack)

    def malformed(self, seq: int | None, reasons: dict[str, int]) -> dict[str, Any]:
        """The loss of the records of chunk `seq` that had not their kind's form (reason ->
        how many), counted and said as one DS/lost value."""
        n = sum(reasons.values())
        first = next(iter(reasons))
        more = f" and {len(reasons) - 1} other form(s)" if len(reasons) > 1 else ""
        where = f" of chunk {seq}" if seq is not None else ""
        return self._lost(n, f"{n} record(s){where} not of their kind's form ({first}{more}): skipped")

    def finish(self) -> None:
        """Said once the records were read (by `__iter__`, or by the caller that read the
        columns): the events whose data did not fit their decoder. Idempotent."""
        if self._finished:
            return
        self._finished = True
        for name, (n, decoder, error) in self.undecodable.items():
            self.warn(f"{name}: the data of {n} event(s) did not fit decoder {decoder!r} (first: {error}): "
                      "kept raw")

    def record(self, r: Any) -> Record | None:
        """The Record of one decoded record; None for a namespace record, which declares its
        entity. Raises Malformed if `r` has not its kind's form."""
        eid, ts = head(r)
        entity = self.entities.get(eid)
        if entity is not None:
            tag, value, start = entity_value(entity, r)
            if entity.kind == "event":
                value = self.event_data(entity, value)
            return Record(ts, entity, tag, value, start, self.source)
        if eid == NAMESPACE:
            self.declare(r)
            return None
        if eid in ADMIN:
            return self.admin_record(r)
        return Record(ts, self.undeclared(eid), None, r[2:], None, self.source)

    def undeclared(self, eid: int) -> EntityInfo:
        """A stand-in for an entity whose namespace record was lost with a damaged chunk;
        said once, then known by it."""
        entity = self.entities[eid] = EntityInfo(eid, "unknown", "?", f"entity{eid}")
        self.warn(f"records of entity id {eid} whose namespace record was lost")
        return entity

    def declare(self, r: list[Any]) -> None:
        """Declare the entity of namespace record `r`. Raises Malformed if it has not a
        namespace record's form."""
        e = self.entities[r[2]] = declared(r)
        try:
            self._decoders[e.id] = decoder_for(e.decoder, self.allowed_decoders)
        except (DecoderRefused, struct.error) as exc:
            self._decoders[e.id] = None
            self.warn(f"{e.full_name}: decoder {e.decoder!r} unavailable ({exc}); extra data kept raw")

    def has_decoder(self, eid: int) -> bool:
        return self._decoders.get(eid) is not None

    def event_data(self, entity: EntityInfo, data: Any) -> Any:
        """An event's extra data, unpacked by its entity's decoder; kept raw, and counted for
        `finish` to say, where the decoder refuses it (bad JSON, bad UTF-8, a short struct,
        or whatever a user's decoder raises)."""
        decode = self._decoders.get(entity.id)
        if data is None or decode is None:
            return data
        try:
            return decode(data)
        except Exception as exc:  # a decoder is the user's or the file's guess: any error is the data's
            self.undecodable_event(entity, f"{type(exc).__name__}: {exc}")
            return data

    def undecodable_event(self, entity: EntityInfo, error: str) -> None:
        """Count one event of `entity` whose data its decoder could not unpack."""
        seen = self.undecodable.setdefault(entity.full_name, [0, entity.decoder, error[:200]])
        seen[0] += 1

    def admin_record(self, r: list[Any]) -> Record:
        """The Record of a stream record (dropped, trigger, close). Raises Malformed."""
        eid, ts = r[0], r[1]
        value = admin_value(r)
        if eid == DROPPED:
            self.records_lost += value["records"]
            self.warn(f"the writer dropped {value['records']} records ({value['reason']})")
        elif eid == CLOSE:
            self.closed_cleanly = True
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
