"""The merge: every stream file of a run, each host's timestamps converted to the reference
host's clock by its clksync fit, onto one time-ordered timeline with an error bound on
every event, written as Parquet (merged/events.parquet and merged/samples.parquet).

A graph in the babeltrace2 manner: one source per stream file turns chunks into columnar
batches in global time (`FileSource`); `merge` interleaves the sources by time with
bounded memory; the sinks write Parquet row groups. Records inside a file are in the
order they were logged, which is time order but for small slips (a thread preempted
between reading the clock and appending); a record can be late by up to `SLACK_NS` and
still take its place, and one later than that is counted in the merge's warnings.
"""

from __future__ import annotations

import collections
import heapq
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numba
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from netspec.clksync.fit import ClockFit
from netspec.datastream.columns import MISSING, Columns
from netspec.datastream.format import NAMESPACE
from netspec.datastream.reader import ADMIN, StreamReader

from .convert import CompiledFit

SLACK_NS = 1_000_000_000
EMIT_RECORDS = 1 << 18
BATCH_RECORDS = 1 << 16
DECODERS = 2
ROW_GROUP = 1 << 19
WRITES_AHEAD = 2
DISTINCT_TABLE_LIMIT = 1 << 16
KINDS = ("event", "interval", "counter", "histogram", "samples", "admin", "unknown")
_KIND = {k: i for i, k in enumerate(KINDS)}
_decode = msgspec.msgpack.decode
_json = msgspec.json.encode

EVENTS = pa.schema([
    ("ts", pa.int64()), ("bound_ns", pa.int64()), ("host", pa.dictionary(pa.int32(), pa.string())),
    ("component", pa.dictionary(pa.int32(), pa.string())), ("stream", pa.dictionary(pa.int32(), pa.string())),
    ("entity", pa.dictionary(pa.int32(), pa.string())), ("kind", pa.dictionary(pa.int32(), pa.string())),
    ("tag", pa.int64()), ("value", pa.float64()), ("start", pa.int64()), ("data", pa.string()),
    ("ts_local", pa.int64())])
DICTIONARY_COLUMNS = [f.name for f in EVENTS if pa.types.is_dictionary(f.type)]
DELTA_COLUMNS = ("ts", "ts_local", "tag", "start")
SAMPLES = pa.schema([
    ("ts", pa.int64()), ("bound_ns", pa.int64()), ("host", pa.string()), ("entity", pa.string()),
    ("field", pa.string()), ("value", pa.float64()), ("text", pa.string())])


class Names:
    """A growing dictionary of strings: the codes a column's indices refer to."""

    def __init__(self, fixed: tuple[str, ...] = ()):
        self.codes: dict[str, int] = {n: i for i, n in enumerate(fixed)}
        self.names: list[str] = list(fixed)
        self._adding = threading.Lock()  # sources decode in worker threads

    def code(self, name: str) -> int:
        c = self.codes.get(name)
        if c is None:
            with self._adding:
                c = self.codes.get(name)
                if c is None:
                    self.names.append(name)
                    c = self.codes[name] = len(self.names) - 1
        return c

    def array(self, indices: np.ndarray) -> pa.DictionaryArray:
        return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()),
                                              pa.array(self.names, pa.string()))


@dataclass
class Batch:
    """Records in global time, as columns; string columns hold Names codes."""

    ts: np.ndarray
    bound: np.ndarray  # -1 where the host's clock could not be fitted
    host: np.ndarray
    component: np.ndarray
    stream: np.ndarray
    entity: np.ndarray
    kind: np.ndarray
    tag: np.ndarray  # MISSING where none
    value: np.ndarray  # NaN where none
    start: np.ndarray  # MISSING where none
    data: pa.StringArray  # JSON text or null; Arrow's, since numpy would hold Python objects
    ts_local: np.ndarray

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, index: np.ndarray) -> Batch:
        return Batch(*(_take_texts(self.data, index) if f == "data" else getattr(self, f)[index]
                       for f in _FIELDS))

    def slice(self, start: int, stop: int | None = None) -> Batch:
        """Rows start:stop, without a copy."""
        return Batch(*(getattr(self, f)[start:stop] for f in _FIELDS))

    def in_order(self) -> bool:
        return bool(np.all(self.ts[1:] >= self.ts[:-1]))

    @classmethod
    def concat(cls, batches: list[Batch]) -> Batch:
        return cls(*(pa.concat_arrays([b.data for b in batches]) if f == "data"
                     else np.concatenate([getattr(b, f) for b in batches]) for f in _FIELDS))


_FIELDS = tuple(Batch.__dataclass_fields__)


def _take_texts(texts: pa.StringArray, index: np.ndarray) -> pa.StringArray:
    # Most batches hold no text at all: nulls cost nothing to make, a take does.
    return pa.nulls(len(index), pa.string()) if texts.null_count == len(texts) else texts.take(index)


@dataclass
class Dictionaries:
    """The string dictionaries every source shares."""

    host: Names = field(default_factory=Names)
    component: Names = field(default_factory=Names)
    stream: Names = field(default_factory=Names)
    entity: Names = field(default_factory=Names)
    kind: Names = field(default_factory=lambda: Names(KINDS))


@dataclass
class Counts:
    records: int = 0
    samples: int = 0
    late: int = 0
    late_worst_ns: int = 0
    unfitted_hosts: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)


class FileSource:
    """One stream file's records as Batches in global time, plus the sample rows it holds
    (`samples`, drained by the caller)."""

    def __init__(self, path: Path, host: str, fit: ClockFit | None, names: Dictionaries, counts: Counts):
        self.reader = StreamReader(path)
        self.host, self.names, self.counts = host, names, counts
        self.fitted = fit is not None and fit.usable
        self.clock = CompiledFit.of(fit) if self.fitted else None  # None too for the reference
        h = self.reader.header
        self.codes = (names.host.code(host), names.component.code(h.get("component") or ""),
                      names.stream.code(h.get("stream") or ""))
        self.samples: list[tuple[np.ndarray, list[dict[str, Any]], str]] = []  # (local ts, values, entity)
        self._entity_code: dict[int, tuple[int, int]] = {}  # entity id -> (entity code, kind code)

    def __iter__(self) -> Iterator[Batch]:
        # Chunks are gathered into batches of about BATCH_RECORDS: what a batch costs is
        # mostly per call, and a chunk holds a few thousand records.
        held: list[Columns] = []
        for seq, item in self.reader.columns():
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


def merge(sources: list[FileSource], counts: Counts) -> Iterator[Batch]:
    """The sources' batches as one time-ordered sequence of batches.

    The source whose last batch ends earliest is read next; everything older than every
    source's frontier minus SLACK_NS can no longer be overtaken and leaves, sorted. Each
    source decodes its next batch ahead in a worker thread (the scanner and numpy let go
    of the GIL), one batch at a time, while this one merges.
    """
    with ThreadPoolExecutor(max_workers=DECODERS, thread_name_prefix="decode") as pool:
        iters = [iter(s) for s in sources]
        ahead = [pool.submit(next, it, None) for it in iters]
        yield from _merge(iters, ahead, pool, counts)


def _merge(iters: list[Iterator[Batch]], ahead: list[Future[Batch | None]], pool: ThreadPoolExecutor,
           counts: Counts) -> Iterator[Batch]:
    frontier = [(np.iinfo(np.int64).min, i) for i in range(len(iters))]
    heapq.heapify(frontier)
    pending: list[Batch] = []
    held = 0
    emitted = np.iinfo(np.int64).min
    while frontier:
        _, i = heapq.heappop(frontier)
        batch = ahead[i].result()
        if batch is not None:
            ahead[i] = pool.submit(next, iters[i], None)
        if batch is None:
            watermark = frontier[0][0] - SLACK_NS if frontier else np.iinfo(np.int64).max
        else:
            late = batch.ts < emitted
            if late.any():
                counts.late += int(late.sum())
                counts.late_worst_ns = max(counts.late_worst_ns, int(emitted - batch.ts[late].min()))
            if not batch.in_order():  # a slip inside a file: sorted once, so each pending batch is a run
                batch = batch.take(np.argsort(batch.ts, kind="stable"))
            pending.append(batch)
            held += len(batch)
            heapq.heappush(frontier, (int(batch.ts.max()), i))
            watermark = frontier[0][0] - SLACK_NS
        # Splitting copies what is held: do it once enough has gathered.
        if held < EMIT_RECORDS and frontier:
            continue
        ready, pending = _split(pending, watermark)
        held = sum(len(b) for b in pending)
        if ready is not None:
            emitted = max(emitted, int(ready.ts[-1]))
            yield ready
    if pending:
        yield _sorted(pending)


def _sorted(runs: list[Batch]) -> Batch:
    """The runs' records as one batch in time order; records of equal times keep the order
    they had, run after run, as a stable sort of the runs end to end would give."""
    if len(runs) == 1:
        return runs[0]
    batch = Batch.concat(runs)
    return batch.take(_merge_order(batch.ts, np.cumsum([len(r) for r in runs])))


@numba.njit(cache=True, nogil=True)
def _merge_order(ts, ends):
    """The order that merges the sorted runs of `ts` ending at `ends`: a k-way merge on a
    binary heap of runs, the earlier run first among equal times. Sorting the whole again
    would cost several times as much."""
    k = len(ends)
    at = np.empty(k, np.int64)  # each run's next record
    heap = np.empty(k, np.int64)
    size = 0
    for r in range(k):
        at[r] = ends[r - 1] if r else 0
        if at[r] == ends[r]:
            continue
        i = size
        size += 1
        while i > 0:  # sift up
            parent = (i - 1) // 2
            q = heap[parent]
            if ts[at[q]] < ts[at[r]] or (ts[at[q]] == ts[at[r]] and q < r):
                break
            heap[i] = q
            i = parent
        heap[i] = r
    order = np.empty(len(ts), np.int64)
    for o in range(len(ts)):
        r = heap[0]
        order[o] = at[r]
        at[r] += 1
        if at[r] == ends[r]:
            size -= 1
            r = heap[size]
        i = 0
        while True:  # sift r down from the top
            child = 2 * i + 1
            if child >= size:
                break
            if child + 1 < size:
                a, b = heap[child], heap[child + 1]
                if ts[at[b]] < ts[at[a]] or (ts[at[b]] == ts[at[a]] and b < a):
                    child += 1
            c = heap[child]
            if ts[at[r]] < ts[at[c]] or (ts[at[r]] == ts[at[c]] and r < c):
                break
            heap[i] = c
            i = child
        if size:
            heap[i] = r
    return order


def _split(pending: list[Batch], watermark: int) -> tuple[Batch | None, list[Batch]]:
    """(the pending records at or before the watermark, sorted; the rest). Each pending
    batch is in time order, so it is cut at the watermark without a copy."""
    early, rest = [], []
    for b in pending:
        k = int(np.searchsorted(b.ts, watermark, side="right"))
        early += [b.slice(0, k)] if k else []
        rest += [b.slice(k)] if k < len(b) else []
    if not early:
        return None, rest
    return _sorted(early), rest


class EventsSink:
    """Writes batches as row groups of about ROW_GROUP rows. Parquet encoding runs in a
    thread of its own (pyarrow lets go of the GIL), beside the decoding of the next rows.
    Up to WRITES_AHEAD row groups wait for it, so memory stays bounded; with only one, the
    merge stood still whenever the encoder lagged, and the decoders with it: one core idle."""

    def __init__(self, path: Path, names: Dictionaries):
        # Dictionaries only where the schema has them, and statistics only on ts: rows are in
        # time order, so every row group holds every host and entity and only ts's ranges
        # let a query skip one. pyarrow's defaults try both on every column: twice the time.
        # Delta encoding suits the times and tags, which rise: half the size, half the time;
        # not the bounds, which wander.
        self.writer = pq.ParquetWriter(path, EVENTS, compression="zstd", use_dictionary=DICTIONARY_COLUMNS,
                                       write_statistics=["ts"],
                                       column_encoding={c: "DELTA_BINARY_PACKED" for c in DELTA_COLUMNS})
        self.names, self.buffered, self.held, self.rows = names, [], 0, 0
        self.encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parquet")
        self.writing: collections.deque[Future[None]] = collections.deque()

    def write(self, batch: Batch) -> None:
        self.buffered.append(batch)
        self.rows += len(batch)
        self.held += len(batch)
        if self.held >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        if not self.buffered:
            return
        n = self.names
        # A table of one record batch per Batch: numpy's integers become Arrow's without a
        # copy, where concatenating the batches first would copy every column.
        table = pa.Table.from_batches([pa.record_batch([
            pa.array(b.ts), pa.array(b.bound, mask=b.bound < 0), n.host.array(b.host),
            n.component.array(b.component), n.stream.array(b.stream), n.entity.array(b.entity),
            n.kind.array(b.kind), pa.array(b.tag, mask=b.tag == MISSING), pa.array(b.value, from_pandas=True),
            pa.array(b.start, mask=b.start == MISSING), b.data, pa.array(b.ts_local)], schema=EVENTS)
            for b in self.buffered], schema=EVENTS)
        self.buffered, self.held = [], 0
        self._wait(WRITES_AHEAD - 1)
        self.writing.append(self.encoder.submit(self.writer.write_table, table, row_group_size=ROW_GROUP))

    def _wait(self, left: int = 0) -> None:
        """Until at most `left` row groups are still being written."""
        while len(self.writing) > left:
            self.writing.popleft().result()  # a failed write raises here, in the merge's thread

    def close(self) -> None:
        try:
            self._flush()
            self._wait()
        finally:
            self.encoder.shutdown()
            self.writer.close()


def write_samples(path: Path, sources: list[FileSource]) -> int:
    """Every sample group's values in long form: one row per field per sample; a value
    that is not a number (a peer's name) is in `text`."""
    columns: dict[str, list[Any]] = {f: [] for f in SAMPLES.names}
    for s in sources:
        if not s.samples:
            continue
        local = np.array([t for t, _, _ in s.samples], dtype=np.int64)
        ts, bound = s.to_global(local)
        for t, b, (_, values, entity) in zip(ts.tolist(), bound.tolist(), s.samples, strict=True):
            for name, v in values.items():
                columns["ts"].append(t)
                columns["bound_ns"].append(b if b >= 0 else None)
                columns["host"].append(s.host)
                columns["entity"].append(entity)
                columns["field"].append(name)
                numeric = isinstance(v, (int, float))
                columns["value"].append(float(v) if numeric else None)
                columns["text"].append(None if numeric or v is None else str(v))
        s.samples.clear()
    table = pa.table(columns, schema=SAMPLES).sort_by([("ts", "ascending")])
    pq.write_table(table, path, compression="zstd")
    return len(table)


def merge_files(files: dict[str, list[Path]], fits: dict[str, ClockFit], out: Path) -> Counts:
    """Merge `files` (host -> stream files) into out/events.parquet and out/samples.parquet."""
    out.mkdir(parents=True, exist_ok=True)
    names, counts = Dictionaries(), Counts()
    sources = [FileSource(p, host, fits.get(host), names, counts)
               for host, paths in sorted(files.items()) for p in sorted(paths)]
    sink = EventsSink(out / "events.parquet", names)
    for batch in merge(sources, counts):
        sink.write(batch)
    sink.close()
    counts.records = sink.rows
    counts.samples = write_samples(out / "samples.parquet", sources)
    if counts.late:
        counts.warnings.append(f"{counts.late} records came more than {SLACK_NS / 1e9:g} s after later "
                               f"ones of their file (worst {counts.late_worst_ns / 1e6:.1f} ms): "
                               "they are in events.parquet but out of time order")
    for host in sorted(counts.unfitted_hosts):
        counts.warnings.append(f"host {host}: no clock fit (no clksync exchanges with the reference): "
                               "its times are its own clock's, bound_ns is null")
    return counts
