"""The merge's sinks: time-ordered Batches as merged/events.parquet, and every source's
sample rows as merged/samples.parquet."""

from __future__ import annotations

import collections
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from netspec.datastream.columns import MISSING

from .batch import Batch, Dictionaries
from .source import FileSource

ROW_GROUP = 1 << 19
WRITES_AHEAD = 2

EVENTS = pa.schema([
    ("ts", pa.int64()), ("bound_ns", pa.int64()), ("host", pa.dictionary(pa.int32(), pa.string())),
    ("component", pa.dictionary(pa.int32(), pa.string())), ("stream", pa.dictionary(pa.int32(), pa.string())),
    ("entity", pa.dictionary(pa.int32(), pa.string())), ("kind", pa.dictionary(pa.int32(), pa.string())),
    ("tag", pa.int64()), ("value", pa.float64()), ("value_int", pa.int64()), ("start", pa.int64()),
    ("data", pa.string()), ("ts_local", pa.int64())])
DICTIONARY_COLUMNS = [f.name for f in EVENTS if pa.types.is_dictionary(f.type)]
DELTA_COLUMNS = ("ts", "ts_local", "tag", "start")
SAMPLES = pa.schema([
    ("ts", pa.int64()), ("bound_ns", pa.int64()), ("host", pa.string()), ("entity", pa.string()),
    ("field", pa.string()), ("value", pa.float64()), ("text", pa.string())])


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
            pa.array(b.value_int, mask=b.value_int == MISSING), pa.array(b.start, mask=b.start == MISSING),
            b.data, pa.array(b.ts_local)], schema=EVENTS)
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
