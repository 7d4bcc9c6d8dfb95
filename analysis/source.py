"""The merge's source: one stream file's chunks, decoded as columns and converted to global
time by its host's clock fit, as Batches (and the sample rows it holds)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pyarrow as pa
from netspec.clksync.fit import ClockFit
from netspec.datastream.columns import MISSING, Columns
from netspec.datastream.format import DROPPED, NAMESPACE
from netspec.datastream.reader import ADMIN, Decoder, Malformed, Record, StreamReader
from netspec.datastream.records import INT64
from netspec.datastream.schema import OUTCOMES

from .batch import BATCH_RECORDS, KINDS, Batch, Counts, Dictionaries

if TYPE_CHECKING:
    from .convert import CompiledFit

DISTINCT_TABLE_LIMIT = 1 << 16
HEADLESS = "not an array led by an entity id and a time"
_KIND = {k: i for i, k in enumerate(KINDS)}
_decode = msgspec.msgpack.decode
_json = msgspec.json.encode


def compiled_fit(fit: ClockFit) -> CompiledFit:
    """`fit` as the compiled conversion takes it."""
    from .convert import CompiledFit  # loads numba: only for a merge that compiles

    compiled = CompiledFit.of(fit)
    assert compiled is not None  # not the reference's
    return compiled


class FileSource:
    """One stream file's records as Batches in global time, plus the sample rows it holds
    (`samples`, drained by the caller)."""

    def __init__(self, path: Path, host: str, fit: ClockFit | None, names: Dictionaries, counts: Counts,
                 decoders: Mapping[str, Decoder] | None = None, compiled: bool = True):
        self.reader = StreamReader(path, decoders)
        self.compiled = compiled
        self.host, self.names, self.counts = host, names, counts
        self.fitted = fit is not None and fit.usable
        # None for the reference too: its times are the timeline's.
        self.clock: ClockFit | CompiledFit | None = None
        if self.fitted and fit.source != "reference":
            self.clock = compiled_fit(fit) if compiled else fit
        h = self.reader.header
        self.codes = (names.host.code(host), names.component.code(h.component), names.stream.code(h.stream))
        self.samples: list[tuple[np.ndarray, list[dict[str, Any]], str]] = []  # (local ts, values, entity)
        self._entity_code: dict[int, tuple[int, int]] = {}  # entity id -> (entity code, kind code)

    def __iter__(self) -> Iterator[Batch]:
        # Chunks are gathered into batches of about BATCH_RECORDS: what a batch costs is
        # mostly per call, and a chunk holds a few thousand records.
        held: list[Columns] = []
        with self.reader:
            for seq, item in self.reader.columns(self.compiled):
                if seq is not None:
                    held.append(item)
                    if sum(map(len, held)) < BATCH_RECORDS:
                        continue
                if held:
                    yield from self._batches(held)
                    held = []
                if seq is None:
                    yield self._lost(item)
            yield from self._batches(held)
        self.reader.finish()
        self.counts.warnings.extend(self.reader.warnings)

    def _batches(self, held: list[Columns]) -> Iterator[Batch]:
        columns = Columns.concat(held) if held else None
        if columns is not None and len(columns):
            yield from self._batch(columns)

    def to_global(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not self.fitted:
            self.counts.unfitted_hosts.add(self.host)
            return local, np.full(len(local), -1, dtype=np.int64)
        if self.clock is None:  # the reference host: its clock is the timeline's
            return local, np.zeros(len(local), dtype=np.int64)
        return self.clock.to_global(local)

    def _codes(self, eid: int) -> tuple[int, int]:
        codes = self._entity_code.get(eid)
        if codes is None:
            e = self.reader.entities.get(eid) or ADMIN.get(eid) or self.reader.undeclared(eid)
            codes = (self.names.entity.code(e.full_name), _KIND.get(e.kind, _KIND["unknown"]))
            self._entity_code[eid] = codes
        return codes

    def _batch(self, cols: Columns) -> Iterator[Batch]:
        """The batch of `cols`' records, then, if some had not their kind's form, a DS/lost
        batch counting them."""
        ints = cols.ints
        eid = ints[:, 0]
        malformed: dict[str, int] = {}
        declared = np.flatnonzero(eid == NAMESPACE)
        for i in declared:
            try:
                self.reader.declare(r := self._record(cols, i))
                self._entity_code.pop(r[2], None)  # declared again: its kind may differ
            except Malformed as exc:
                malformed[str(exc)] = malformed.get(str(exc), 0) + 1
        # Most batches hold no namespace records and no samples: their rows are all kept,
        # by slices, which copy nothing.
        keep = np.flatnonzero(eid != NAMESPACE) if len(declared) else slice(None)
        eid, ts_local = eid[keep], np.ascontiguousarray(ints[keep, 1])
        a2, a3, a4, items = ints[keep, 2], ints[keep, 3], ints[keep, 4], cols.items[keep]
        # A record that is not [id, ts, ...] with integers there is refused, never a row (a
        # ts MISSING is below 0 too); its id is looked up as a stream record's, said nowhere.
        bad = _note(malformed, (eid == MISSING) | (ts_local < 0), HEADLESS)
        ids, inverse = _distinct(np.where(bad, DROPPED, eid))
        table = np.array([self._codes(int(i)) for i in ids], dtype=np.int32).reshape(-1, 2)
        entity, kind = table[inverse, 0], table[inverse, 1]
        n = len(eid)
        tag = np.full(n, MISSING, dtype=np.int64)
        value = np.full(n, np.nan)
        exact = np.full(n, MISSING, dtype=np.int64)
        start = np.full(n, MISSING, dtype=np.int64)
        data: list[str | None] = [None] * n

        bad |= _note(malformed, (kind == _KIND["event"]) & (items < 3) & ~bad, "an event without a tag")
        ev = (kind == _KIND["event"]) & ~bad
        tag[ev] = a2[ev]
        # Integer data of an entity without a decoder is the event's value as it stands.
        decoded = np.array([self.reader.has_decoder(int(i)) for i in ids], dtype=bool)[inverse]
        plain = ev & (items == 4) & (a3 != MISSING) & ~decoded
        value[plain] = a3[plain]
        exact[plain] = a3[plain]
        iv = (kind == _KIND["interval"]) & ~bad
        bad |= _note(malformed, iv & ((items < 4) | (a3 < 0)), "an interval without a start time")
        iv &= ~bad
        tag[iv], start[iv], exact[iv] = a2[iv], a3[iv], ts_local[iv] - a3[iv]
        value[iv] = exact[iv]
        # An operation: the outcome where the tag goes, the start its latency counts from,
        # the latency as its value; its lag, and its cause where it has one (a sixth item,
        # decoded below), in data.
        op = (kind == _KIND["operation"]) & ~bad
        bad |= _note(malformed, op & ((items < 5) | (a2 < 0) | (a2 >= len(OUTCOMES)) | (a3 < 0) | (a4 < 0)),
                     "an operation without an outcome, a start and a lag")
        op &= ~bad
        tag[op], start[op], exact[op] = a2[op], a3[op], ts_local[op] - a3[op]
        value[op] = exact[op]
        plain_op = op & (items == 5)
        for j, lag in zip(np.flatnonzero(plain_op).tolist(), a4[plain_op].tolist(), strict=True):
            data[j] = f'{{"lag_ns":{lag}}}'
        ct = (kind == _KIND["counter"]) & (a2 != MISSING) & (items >= 3) & ~bad
        value[ct], exact[ct] = a2[ct], a2[ct]
        # The rest need their whole record decoded: event data, float counters,
        # histograms, samples, admin and unknown records. They are few.
        slow = np.flatnonzero(((ev & (items > 3) & ~plain) | ((kind == _KIND["counter"]) & ~ct)
                               | (op & ~plain_op) | (kind >= _KIND["histogram"])) & ~bad)
        is_sample = np.zeros(n, dtype=bool)
        for j in slow:
            try:
                r = self._record(cols, keep[j] if len(declared) else j)
                record = self.reader.record(r)
                assert record is not None  # namespace records were taken out above
            except Malformed as exc:
                bad[j] = True
                malformed[str(exc)] = malformed.get(str(exc), 0) + 1
                continue
            if record.entity.kind == "samples":
                is_sample[j] = True
                self.samples.append((ts_local[j], record.value, self.names.entity.names[entity[j]]))
            else:
                value[j], exact[j], data[j] = _columns_of(record)
        rows = np.flatnonzero(~(is_sample | bad)) if is_sample.any() or bad.any() else slice(None)
        ts_local = ts_local[rows]
        ts, bound = self.to_global(ts_local)
        st = start[rows]
        has_start = st != MISSING
        if has_start.any():
            st[has_start] = self.to_global(st[has_start])[0]
        h, c, s = self.codes
        m = len(ts_local)
        if not len(slow) and not plain_op.any():
            texts = pa.nulls(m, pa.string())
        else:
            texts = pa.array(data, pa.string())
            texts = texts.take(rows) if m < n else texts
        if m:
            yield Batch(ts, bound, np.full(m, h, np.int32), np.full(m, c, np.int32), np.full(m, s, np.int32),
                        entity[rows], kind[rows], tag[rows], value[rows], exact[rows], st, texts, ts_local)
        if malformed:
            yield self._lost(self.reader.malformed(None, malformed))

    def _record(self, cols: Columns, i: int) -> list[Any]:
        a, b = cols.spans[i]
        try:
            return _decode(cols.body[a:b])
        except ValueError as exc:  # a string that is not UTF-8, say: the scanner skips strings unread
            raise Malformed(f"not MessagePack ({exc})") from None

    def _lost(self, loss: dict[str, Any]) -> Batch:
        last = self.reader.header.created_ns
        local = np.array([last], dtype=np.int64)
        ts, bound = self.to_global(local)
        h, c, s = self.codes
        return Batch(ts, bound, np.array([h], np.int32), np.array([c], np.int32), np.array([s], np.int32),
                     np.array([self.names.entity.code("DS/lost")], np.int32),
                     np.array([_KIND["admin"]], np.int32), np.array([MISSING]), np.array([np.nan]),
                     np.array([MISSING]), np.array([MISSING]), pa.array([_text(loss)], pa.string()), local)


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values, the index of each value among them), as np.unique gives; entity
    ids are small, so a table indexed by id does it without sorting."""
    if len(values) and values.min() >= 0 and values.max() < DISTINCT_TABLE_LIMIT:
        present = np.bincount(values) > 0
        return np.flatnonzero(present), (np.cumsum(present) - 1)[values]
    return np.unique(values, return_inverse=True)


def _text(value: Any) -> str:
    """`value` as JSON: bytes as hex, a MessagePack extension as {ext, data}; what JSON cannot
    hold at all (a user's decoder may make anything) as the JSON string of its repr."""
    try:
        return _json(value, enc_hook=_plain).decode()
    except (TypeError, ValueError, OverflowError):
        return _json(repr(value)).decode()


def _plain(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, msgspec.msgpack.Ext):
        return {"ext": value.code, "data": value.data.hex()}
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _note(malformed: dict[str, int], rows: np.ndarray, reason: str) -> np.ndarray:
    """Count the records `rows` marks as malformed for `reason`; returns `rows`."""
    if (n := int(rows.sum())):
        malformed[reason] = malformed.get(reason, 0) + n
    return rows


def _columns_of(record: Record) -> tuple[float, int, str | None]:
    """(value, the value as an exact int64 or MISSING, data as JSON or None) of a record the
    columns alone did not give: numeric data goes to the value columns, anything else to
    data as JSON."""
    kind, v = record.entity.kind, record.value
    if kind in ("event", "counter") and type(v) in (int, float):
        return float(v), v if type(v) is int and v in INT64 else MISSING, None
    if kind == "histogram":
        # The spec beside the counts: each row says its bins, so rows of one spec merge exactly.
        total = v["sum"]
        return float(total), total if type(total) is int and total in INT64 else MISSING, \
            _text({**v, **record.entity.spec})
    if kind == "operation":
        latency = v["latency_ns"]
        return float(latency), latency, _text({"lag_ns": v["lag_ns"], "cause": v["cause"]})
    return np.nan, MISSING, _text(v)
