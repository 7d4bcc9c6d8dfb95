"""Rates and shares derived from two raw CAMP readings: kept apart from the raw API so
that what is measured and what is computed from it never mix."""

from __future__ import annotations

from typing import Any

from .counters import CpuTimes, ProcessCounters


def per_second(before: Any, after: Any, elapsed_ns: int) -> dict[str, float]:
    """Each counter field of two readings (NetCounters, DiskCounters...) as a rate."""
    b, a = before._asdict(), after._asdict()
    return {k: (a[k] - b[k]) * 1e9 / elapsed_ns for k in a if isinstance(a[k], int)}


def cpu_percent(before: CpuTimes, after: CpuTimes) -> float:
    """Busy % of the CPUs the readings cover, between them."""
    total = after.total - before.total
    return 100.0 * (after.busy - before.busy) / total if total > 0 else 0.0


def process_cpu_percent(before: ProcessCounters, after: ProcessCounters, elapsed_ns: int) -> float:
    """% of one CPU the process used between the readings (can exceed 100 with threads)."""
    return 100.0 * (after.cpu_ns - before.cpu_ns) / elapsed_ns
