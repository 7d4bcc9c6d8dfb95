"""A duration as the experiment file writes it (2, 1.5, "250ms", "3s", "2m", "1h"), in seconds.
The schema has checked its form before any section is read."""

from __future__ import annotations

import re

_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: float | str) -> float:
    if isinstance(value, int | float):
        return float(value)
    number, unit = re.fullmatch(r"([0-9.]+)(ms|s|m|h)", value).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]
