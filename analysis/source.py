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
from netspec.datastream.format import NAMESPACE
from netspec.datastream.reader import ADMIN, Decoder, StreamReader

from .batch import BATCH_RECORDS, KINDS, Batch, Counts, Dictionaries

if TYPE_CHECKING:
    from .convert import CompiledFit

DISTINCT_TABLE_LIMIT = 1 << 16
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
        self.codes = (names.host.code(host), names.component.code(h.get("component") or ""),
                      names.stream.code(h.get("stream") or ""))
        self.samples: list[tuple[np.ndarray, list[dict[str, Any]], str]] = []  # (local ts, values, entity)
        self._entity_code: dict[int, tuple[int, int]] = {}  # entity id -> (entity code, kind code)

    def __iter__(self) -> Iterator[Batch]:
        # Chunks are gathered into batches of about BATCH_RECORDS: what a batch costs is
        # mostly per call, and a chunk holds a few thousand records.
        held: list[Columns] = []
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
        self.counts.warnings.extend(self.reader.warnings)

    def _batches(self, held: list[Columns]) -> Iterator[Batch]:
        columns = Columns.concat(held) if held else None
        if columns is not None and len(columns):
            batch = self._batch(columns)
            if len(batch):
                yield batch

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

    def _batch(self, cols: Columns) -> Batch:
        ints = cols.ints
        eid = ints[:, 0]
        declared = np.flatnonzero(eid == NAMESPACE)
        for i in declared:
            self.reader.declare(self._record(cols, i))
        # Most batches hold no namespace records and no samples: their rows are all kept,
        # by slices, which copy nothing.
        keep = np.flatnonzero(eid != NAMESPACE) if len(declared) else slice(None)
        eid, ts_local = eid[keep], np.ascontiguousarray(ints[keep, 1])
        a2, a3, items = ints[keep, 2], ints[keep, 3], cols.items[keep]
        ids, inverse = _distinct(eid)
        table = np.array([self._codes(int(i)) for i in ids], dtype=np.int32).reshape(-1, 2)
        entity, kind = table[inverse, 0], table[inverse, 1]
        n = len(eid)
        tag = np.full(n, MISSING, dtype=np.int64)
        value = np.full(n, np.nan)
        start = np.full(n, MISSING, dtype=np.int64)
        data: list[str | None] = [None] * n

        ev = kind == _KIND["event"]
        tag[ev] = a2[ev]
        # Integer data of an entity without a decoder is the event's value as it stands.
        decoded = np.array([self.reader.has_decoder(int(i)) for i in ids], dtype=bool)[inverse]
        plain = ev & (items == 4) & (a3 != MISSING) & ~decoded
        value[plain] = a3[plain]
        iv = kind == _KIND["interval"]
        tag[iv], value[iv], start[iv] = a2[iv], (ts_local[iv] - a3[iv]).astype(float), a3[iv]
        ct = (kind == _KIND["counter"]) & (a2 != MISSING)
        value[ct] = a2[ct]
        # The rest need their whole record decoded: event data, float counters,
        # histograms, samples, admin and unknown records. They are few.
        slow = np.flatnonzero((ev & (items > 3) & ~plain) | ((kind == _KIND["counter"]) & (a2 == MISSING))
                              | (kind >= _KIND["histogram"]))
        is_sample = np.zeros(n, dtype=bool)
        for j in slow:
            r = self._record(cols, keep[j] if len(declared) else j)
            k = KINDS[kind[j]]
            if k == "event":
                value[j], data[j] = _event_data(self.reader, int(eid[j]), r[3])
            elif k == "counter":
                value[j] = r[2]
            elif k == "histogram":
                value[j], data[j] = r[3], _text({"counts": r[2], "sum": r[3]})
            elif k == "samples":
                is_sample[j] = True
                spec = self.reader.entities[int(eid[j])].spec.get("fields", ())
                self.samples.append((ts_local[j], dict(zip(spec, r[2], strict=False)),
                                     self.names.entity.names[entity[j]]))
            else:
                data[j] = _text(_admin_value(self.reader, r))
        rows = np.flatnonzero(~is_sample) if is_sample.any() else slice(None)
        ts_local = ts_local[rows]
        ts, bound = self.to_global(ts_local)
        st = start[rows]
        has_start = st != MISSING
        if has_start.any():
            st[has_start] = self.to_global(st[has_start])[0]
        h, c, s = self.codes
        m = len(ts_local)
        if not len(slow):
            texts = pa.nulls(m, pa.string())
        else:
            texts = pa.array(data, pa.string())
            texts = texts.take(rows) if m < n else texts
        return Batch(ts, bound, np.full(m, h, np.int32), np.full(m, c, np.int32), np.full(m, s, np.int32),
                     entity[rows], kind[rows], tag[rows], value[rows], st, texts, ts_local)

    def _record(self, cols: Columns, i: int) -> list[Any]:
        a, b = cols.spans[i]
        return _decode(cols.body[a:b])

    def _lost(self, loss: dict[str, Any]) -> Batch:
        last = self.reader.header.get("created_ns", 0)
        local = np.array([last], dtype=np.int64)
        ts, bound = self.to_global(local)
        h, c, s = self.codes
        return Batch(ts, bound, np.array([h], np.int32), np.array([c], np.int32), np.array([s], np.int32),
                     np.array([self.names.entity.code("DS/lost")], np.int32),
                     np.array([_KIND["admin"]], np.int32), np.array([MISSING]), np.array([np.nan]),
                     np.array([MISSING]), pa.array([_text(loss)], pa.string()), local)


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values, the index of each value among them), as np.unique gives; entity
    ids are small, so a table indexed by id does it without sorting."""
    if len(values) and values.min() >= 0 and values.max() < DISTINCT_TABLE_LIMIT:
        present = np.bincount(values) > 0
        return np.flatnonzero(present), (np.cumsum(present) - 1)[values]
    return np.unique(values, return_inverse=True)


def _text(value: Any) -> str:
    return _json(value, enc_hook=_bytes_hex).decode()


def _bytes_hex(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def _event_data(reader: StreamReader, eid: int, raw: Any) -> tuple[float, str | None]:
    """Numeric data goes to the value column, anything else to data as JSON."""
    value = reader.event_data(eid, raw)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value), None
    return np.nan, _text(value)


def _admin_value(reader: StreamReader, r: list[Any]) -> Any:
    return reader.admin_record(r).value if r[0] in ADMIN else r[2:]
