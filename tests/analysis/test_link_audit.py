"""The link audit's arithmetic (analysis/links.py) against known answers: the Wilson
interval, and the verdict of a link and step from its figures."""

from __future__ import annotations

import pytest
from netspec.analysis.links import Condition, verdict, wilson


def test_the_wilson_interval_matches_its_known_values() -> None:
    lo, hi = wilson(5, 100)
    assert lo == pytest.approx(0.02154, abs=1e-4) and hi == pytest.approx(0.11175, abs=1e-4)
    lo, hi = wilson(0, 50)
    assert lo == 0.0 and hi == pytest.approx(0.07135, abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)


def _row(**figures: object) -> dict:
    row = {"probes_sent": 100, "probes_received": 95, "delay_p50_ms": 10.1, "delay_bound_ms": 0.05,
           "loss_pct": 5.0, "loss_low_pct": 2.15, "loss_high_pct": 11.18, "rate_mbit": None,
           "bottleneck": None}
    return {**row, **figures}


def test_a_link_within_its_tolerances_is_said_so() -> None:
    assert verdict(_row(), Condition(delay_ms=10.0, loss_pct=5.0)) == (True, "within tolerance")


def test_a_link_off_says_by_how_much_in_each_way() -> None:
    within, words = verdict(_row(delay_p50_ms=12.0, loss_pct=20.0, loss_low_pct=13.3, loss_high_pct=28.9),
                            Condition(delay_ms=10.0, loss_pct=5.0, backend="user"))
    assert within is False
    assert "delay p50 12.000 ms, +2.000 ms off 10 ms (tolerance 0.550 ms)" in words
    assert "loss 20.0 % [13.3, 28.9] against 5 %" in words


def test_a_partition_that_let_probes_through_is_off() -> None:
    assert verdict(_row(probes_received=3), Condition(partition=True)) == (
        False, "partition leaked 3 of 100 probes")
    assert verdict(_row(probes_received=0), Condition(partition=True))[0] is True
