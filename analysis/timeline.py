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

import heapq
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from netspec.clksync.fit import ClockFit
from netspec.datastream.columns import COMPILED_FROM_BYTES
from netspec.datastream.reader import Decoder
from netspec.protocol.errors import StreamError

from .batch import Batch, Counts, Dictionaries
from .sinks import EventsSink, write_samples
from .source import FileSource

SLACK_NS = 1_000_000_000
EMIT_RECORDS = 1 << 18
DECODERS = 2


def merge(sources: list[FileSource], counts: Counts, compiled: bool = True) -> Iterator[Batch]:
    """The sources' batches as one time-ordered sequence of batches.

    The source whose last batch ends earliest is read next; everything older than every
    source's frontier minus SLACK_NS can no longer be overtaken and leaves, sorted. Each
    source decodes its next batch ahead in a worker thread (the scanner and numpy let go
    of the GIL), one batch at a time, while this one merges.
    """
    with ThreadPoolExecutor(max_workers=DECODERS, thread_name_prefix="decode") as pool:
        iters = [iter(s) for s in sources]
        ahead = [pool.submit(next, it, None) for it in iters]
        yield from _merge(iters, ahead, pool, counts, compiled)


def _merge(iters: list[Iterator[Batch]], ahead: list[Future[Batch | None]], pool: ThreadPoolExecutor,
           counts: Counts, compiled: bool) -> Iterator[Batch]:
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
        ready, pending = _split(pending, watermark, compiled)
        held = sum(len(b) for b in pending)
        if ready is not None:
            emitted = max(emitted, int(ready.ts[-1]))
            yield ready
    if pending:
        yield _sorted(pending, compiled)


def _sorted(runs: list[Batch], compiled: bool) -> Batch:
    """The runs' records as one batch in time order; records of equal times keep the order
    they had, run after run, as a stable sort of the runs end to end would give."""
    if len(runs) == 1:
        return runs[0]
    batch = Batch.concat(runs)
    if not compiled:
        return batch.take(np.argsort(batch.ts, kind="stable"))
    from .ordering import merge_order

    return batch.take(merge_order(batch.ts, np.cumsum([len(r) for r in runs])))


def _split(pending: list[Batch], watermark: int, compiled: bool) -> tuple[Batch | None, list[Batch]]:
    """(the pending records at or before the watermark, sorted; the rest). Each pending
    batch is in time order, so it is cut at the watermark without a copy."""
    early, rest = [], []
    for b in pending:
        k = int(np.searchsorted(b.ts, watermark, side="right"))
        early += [b.slice(0, k)] if k else []
        rest += [b.slice(k)] if k < len(b) else []
    if not early:
        return None, rest
    return _sorted(early, compiled), rest


def merge_files(files: dict[str, list[Path]], fits: dict[str, ClockFit], out: Path,
                decoders: Mapping[str, Decoder] | None = None, compiled: bool | None = None) -> Counts:
    """Merge `files` (host -> stream files) into out/events.parquet and out/samples.parquet;
    `decoders` are the user's own, besides the built-in ones. `compiled`: decode, convert and
    order with numba's compiled code; by default when the files hold COMPILED_FROM_BYTES or
    more (the results are the same either way, the time is not)."""
    out.mkdir(parents=True, exist_ok=True)
    names, counts = Dictionaries(), Counts()
    sources = []
    if compiled is None:
        compiled = sum(p.stat().st_size for paths in files.values() for p in paths) >= COMPILED_FROM_BYTES
    for host, paths in sorted(files.items()):
        for path in sorted(paths):
            try:
                sources.append(FileSource(path, host, fits.get(host), names, counts, decoders, compiled))
            except StreamError as exc:  # this file's loss, not the run's
                counts.warnings.append(f"{exc}: not merged")
    sink = EventsSink(out / "events.parquet", names)
    for batch in merge(sources, counts, compiled):
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
