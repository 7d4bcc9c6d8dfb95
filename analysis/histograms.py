"""Log histograms merged: every record of a log-scale histogram entity (nodelib.histogram
with `relative_error`) in a step, over every host and process that logged it, added bin by
bin, exactly, into one histogram whose percentiles are those of all the values it holds
(never an average of per-host percentiles), each within the scale's relative error. A
campaign's points merge the histograms of their runs alike (`merge_rows`).

Each record counts the values since the last (`flush()`): records add. A row's data carries
its spec (events.parquet), so histograms of different bins are refused by name, never
added.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import duckdb
import numpy as np
from netspec.datastream.loghist import LOG, LogScale, Quantile, SpecsDiffer, quantile

SPEC_KEYS = ("lo", "hi", "buckets", "scale")


@dataclass(frozen=True)
class MergedHistogram:
    """One log histogram entity's records in one step, added bin by bin over every host and
    process (`sources`) that logged it: `quantile(q)` is of every value they hold."""

    step: int
    phase: str
    name: str
    sources: int  # the host/component pairs whose records it adds
    records: int
    scale: LogScale | None
    counts: tuple[int, ...]
    refused: str = ""  # why its records were not merged (bins that differ)

    @property
    def count(self) -> int:
        return sum(self.counts)

    def quantile(self, q: float) -> Quantile | None:
        return quantile(self.scale, self.counts, q) if self.scale is not None else None

    def line(self) -> str:
        """`report`'s line of it."""
        if self.scale is None:
            return f"{self.name}: not merged: {self.refused}"
        return (f"{self.name}: log histogram, {self.records} record(s) of {self.sources} source(s) merged, "
                f"{quantiles_text(self.scale, self.counts)}")


def _spec(data: dict) -> dict:
    return {k: data.get(k) for k in SPEC_KEYS}


def merge_rows(rows: Iterable[tuple[str, str]]) -> tuple[LogScale, np.ndarray, int, int]:
    """(scale, counts, records, sources) of rows (source, data JSON) of one log histogram
    entity. Raises SpecsDiffer where two rows' bins differ, ValueError where there is none."""
    spec: dict | None = None
    parts: list[list[int]] = []
    sources = set()
    for source, text in rows:
        data = json.loads(text)
        s = _spec(data)
        if spec is None:
            spec = s
        elif s != spec:
            raise SpecsDiffer(f"histograms of different bins cannot be merged exactly: {spec} "
                              f"({sorted(sources)[0]}) and {s} ({source})")
        parts.append(data["counts"])
        sources.add(source)
    if spec is None:
        raise ValueError("no histogram to merge")
    counts = np.sum(np.array(parts, dtype=np.int64), axis=0)
    return LogScale.of(spec), counts, len(parts), len(sources)


def run_histograms(db: duckdb.DuckDBPyConnection) -> dict[str, tuple[LogScale, np.ndarray, int]]:
    """Every log histogram entity of a run, all its records (every host, every step) merged:
    name -> (scale, counts, sources). One whose records' bins differ is left out, and said
    by the SpecsDiffer it raises."""
    rows = db.execute(f"""SELECT entity, host || '/' || component, data FROM events
                          WHERE kind = 'histogram' AND json_extract_string(data, '$.scale') = '{LOG}'
                          ORDER BY entity, ts""").fetchall()
    groups: dict[str, list[tuple[str, str]]] = {}
    for name, source, data in rows:
        groups.setdefault(name, []).append((source, data))
    merged = {}
    for name, group in groups.items():
        try:
            scale, counts, _, sources = merge_rows(group)
        except SpecsDiffer as exc:
            raise SpecsDiffer(f"{name}: {exc}") from None
        merged[name] = (scale, counts, sources)
    return merged


def quantiles_text(scale: LogScale, counts: Iterable[int]) -> str:
    """p50, p99 and p99.9 of a log histogram's counts, in words, with its error bound."""
    counts = list(counts)
    said = []
    for label, q in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)):
        got = quantile(scale, counts, q)
        if got is not None:
            value = (f"< {scale.lo:.4g}" if got.below else f">= {scale.hi:.4g}" if got.above
                     else f"{got.value:.4g}")
            said.append(f"{label} {value}")
    error = f"each within {100 * scale.relative_error:.2g} %"
    return f"{sum(counts)} values, {', '.join(said) or 'none'} ({error})"


def merged_histograms(db: duckdb.DuckDBPyConnection, spans_sql: str) -> list[MergedHistogram]:
    """Each step's log histograms, every host's records merged, in step and name order; a
    record belongs to the step its time falls in (log it before the phase's ack)."""
    rows = db.execute(f"""WITH s AS ({spans_sql})
        SELECT s.step, s.phase, e.entity, e.host || '/' || e.component, e.data FROM events e
        JOIN s ON e.ts BETWEEN s.lo AND s.hi
        WHERE e.kind = 'histogram' AND json_extract_string(e.data, '$.scale') = '{LOG}'
        ORDER BY s.step, e.entity""").fetchall()
    groups: dict[tuple[int, str, str], list[tuple[str, str]]] = {}
    for step, phase, name, source, data in rows:
        groups.setdefault((step, phase, name), []).append((source, data))
    merged = []
    for (step, phase, name), group in groups.items():
        try:
            scale, counts, records, sources = merge_rows(group)
        except SpecsDiffer as exc:
            merged.append(MergedHistogram(step, phase, name, len({s for s, _ in group}), len(group), None, (),
                                          str(exc)))
            continue
        merged.append(MergedHistogram(step, phase, name, sources, records, scale, tuple(counts.tolist())))
    return merged
