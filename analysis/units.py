"""Units chosen for the data: a column of nanoseconds shown in ns, us, ms or s, whichever
keeps its typical value between 1 and 1000, so no axis reads 1e7."""

from __future__ import annotations

from collections.abc import Iterable

TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3), ("ns", 1.0))


def time_unit(values_ns: Iterable[float]) -> tuple[str, float]:
    """(unit, ns per unit) for a set of durations: the largest unit its median reaches."""
    finite = sorted(abs(v) for v in values_ns if v is not None and v == v)
    typical = finite[len(finite) // 2] if finite else 0.0
    return next(((name, scale) for name, scale in TIME_UNITS if typical >= scale), TIME_UNITS[-1])


def duration_text(ns: float | None) -> str:
    """A duration in the unit that suits it alone: '226 ms', '83 us', '1.23 s'."""
    if ns is None:
        return "-"
    unit, scale = time_unit([ns])
    value = ns / scale
    return f"{value:.3g} {unit}" if abs(value) < 100 else f"{value:.0f} {unit}"


def rate_text(value: float | None, unit: str) -> str:
    """A rate with an SI prefix: '12.3 k/s', '0.42 cpus'."""
    if value is None or value != value:
        return "-"
    for prefix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale and unit != "cpus":
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"
