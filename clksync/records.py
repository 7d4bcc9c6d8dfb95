"""A run's clksync records, read back from its stream files and fitted per host."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from netspec.datastream.reader import StreamReader
from netspec.datastream.records import INT64
from netspec.protocol.errors import StreamError
from netspec.protocol.runrecord import RunRecord

from .fit import ClockFit, Exchanges, fit


@dataclass
class HostClock:
    """One host's clksync records: its exchanges with the reference and its clock changes
    (host times at which they were seen)."""

    exchanges: list[tuple[int, int, int, int, bool]] = field(default_factory=list)
    changes: list[int] = field(default_factory=list)


def read_host(paths: list[Path]) -> HostClock:
    """A host's clksync records. A file that is no stream, and an exchange whose times are
    not integers, are left out here; the merge, which reads every stream file, says so."""
    host = HostClock()
    for path in paths:
        try:
            reader = StreamReader(path)
        except StreamError:
            continue
        with reader:
            for rec in reader:
                name = rec.entity.full_name
                if name == "CLKSYNC/exchange" and isinstance(rec.value, dict):
                    v = rec.value
                    times = [v.get(k) for k in ("t1", "t2", "t3", "t4")]
                    if all(type(t) is int and t in INT64 for t in times):
                        host.exchanges.append((*times, bool(v.get("kernel"))))
                elif name == "CLKSYNC/change":
                    host.changes.append(rec.ts)
    return host


def _reference_changes_in(host: HostClock, reference_changes: list[int]) -> list[int]:
    """The reference's clock changes in this host's time, through the exchange nearest each."""
    if not host.exchanges or not reference_changes:
        return []
    rows = np.array([e[:4] for e in sorted(host.exchanges, key=lambda e: e[1])], dtype=np.int64)
    at = np.clip(np.searchsorted(rows[:, 1], reference_changes), 0, len(rows) - 1)
    return [int(c + rows[i, 0] - rows[i, 1]) for c, i in zip(reference_changes, at, strict=True)]


def fit_run(run: Path, record: RunRecord) -> dict[str, ClockFit]:
    """Every host's clock fit for the run directory `run` whose record is given, the
    reference's included.

    Raises:
        ValueError: the run names no clock reference.
    """
    reference = record.clock_reference
    if reference is None:
        raise ValueError("the run names no clock reference")
    hosts = {d.name: read_host(sorted(d.glob("streams/clksync.*.ds")))
             for d in sorted((run / "hosts").iterdir()) if d.is_dir()}
    ref_changes = hosts[reference].changes if reference in hosts else []
    fits = {}
    for name, host in hosts.items():
        if name == reference:
            fits[name] = ClockFit.identity(name)
            continue
        changes = host.changes + _reference_changes_in(host, ref_changes)
        fits[name] = fit(name, reference, Exchanges.from_rows(host.exchanges), changes)
    return fits
