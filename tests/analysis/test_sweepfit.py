"""A campaign's metrics against its swept parameter: the least-squares slope with its
standard error, a time fitted in milliseconds, and what is too few points to fit."""

import numpy as np
import pytest
from netspec.analysis.metrics import Metric
from netspec.analysis.sweepfit import fit, fit_lines, fits


def _metric(name: str, unit: str, values: list[float]) -> Metric:
    return Metric(name, unit, np.array(values, dtype=float), np.arange(len(values), dtype=np.int64))


def test_a_time_in_microseconds_is_fitted_in_milliseconds_against_a_delay() -> None:
    delays = {"d0": 0.0, "d50": 50.0, "d100": 100.0, "d200": 200.0}
    # a frame: 5 ms of its own and the delay once; the loop: 6 ms and the delay twice (in us)
    points = {label: {"interval frame": _metric("interval frame", "us", [(5 + d) * 1e3, (5.2 + d) * 1e3]),
                      "interval loop": _metric("interval loop", "us", [(6 + 2 * d) * 1e3] * 2)}
              for label, d in delays.items()}
    frame, loop = fits(delays, points)
    assert (frame.unit, frame.points) == ("ms", 4)
    assert frame.slope == pytest.approx(1.0) and frame.intercept == pytest.approx(5.1)
    assert loop.slope == pytest.approx(2.0) and loop.stderr == pytest.approx(0.0, abs=1e-9)
    lines = fit_lines("links.wan.delay", "ms", [frame, loop])
    assert lines[0] == "against links.wan.delay (least squares over the points' means):"
    assert lines[2].startswith(
        "  interval loop: slope 2.000 ± 0.000 ms per ms of links.wan.delay, intercept 6.000")


def test_the_slopes_standard_error_is_the_textbooks() -> None:
    got = fit("m", "count", [1, 2, 3, 4], [2.0, 4.1, 5.9, 8.2])
    assert got is not None and got.unit == "count"
    # by hand: Sxy 10.2, Sxx 5; the residuals' squares sum to 0.042 over 2 degrees of freedom
    assert got.slope == pytest.approx(2.04) and got.stderr == pytest.approx((0.042 / 2 / 5) ** 0.5)


def test_too_few_points_or_one_value_of_the_axis_is_no_fit() -> None:
    assert fit("m", "us", [1, 2], [1.0, 2.0]) is None
    assert fit("m", "us", [3, 3, 3], [1.0, 2.0, 3.0]) is None
    assert fit_lines("x", "", []) == []
