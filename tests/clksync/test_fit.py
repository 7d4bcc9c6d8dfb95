"""The offline clock fit on synthetic exchanges whose true offset is known."""

import numpy as np
from clockwarp import EPOCH, warp
from netspec.analysis.convert import CompiledFit
from netspec.clksync.fit import ClockFit, Exchanges, fit, hard_bounds, line_bounds
from netspec.clksync.hull import offset_range


def exchanges(theta, seconds=120.0, rate_hz=20, seed=1, one_way_ns=5_000, jitter_ns=2_000):
    """Exchanges of a host whose clock reads true time + theta(true time); the reference
    keeps true time. Returns the exchanges and the true span."""
    rng = np.random.default_rng(seed)
    n = int(seconds * rate_hz)
    g1 = EPOCH + np.cumsum(rng.integers(int(0.5e9 / rate_hz), int(1.5e9 / rate_hz), n))
    g2 = g1 + one_way_ns + rng.exponential(jitter_ns, n).astype(np.int64)
    g3 = g2 + rng.integers(10_000, 80_000, n)
    g4 = g3 + one_way_ns + rng.exponential(jitter_ns, n).astype(np.int64)
    return Exchanges(g1 + theta(g1), g2, g3, g4 + theta(g4), np.ones(n, bool)), (int(g1[0]), int(g4[-1]))


def errors(result: ClockFit, theta, span, n=200_000, seed=2):
    true = np.sort(np.random.default_rng(seed).integers(*span, n))
    converted, bound = result.to_global(true + theta(true))
    assert converted.dtype == np.int64 and bound.dtype == np.int64
    return converted - true, bound


def test_offset_drift_and_wander_are_recovered_and_the_bound_holds_everywhere():
    theta = warp()
    ex, span = exchanges(theta)
    err, bound = errors(fit("b", "a", ex), theta, span)
    assert np.all(np.abs(err) <= bound)
    assert np.percentile(np.abs(err), 99) < 1_000
    assert np.median(bound) < 8_000  # the one-way floor is 5 us: the bound is about that


def test_a_long_stretch_of_queued_requests_is_bridged_by_the_fast_exchanges_around_it():
    # From 40 s to 70 s every request waits 1 to 3 ms in a queue, the replies do not: each
    # exchange there alone says the offset is about 1 ms off. The fit reaches past them;
    # a line over 30 s follows the 5 us wander only roughly.
    theta = warp()
    ex, span = exchanges(theta)
    true_t1 = ex.t1 - theta(ex.t1)
    queued = (true_t1 >= EPOCH + 40 * 10**9) & (true_t1 < EPOCH + 70 * 10**9)
    delay = np.random.default_rng(3).integers(1_000_000, 3_000_000, int(queued.sum()))
    ex.t2[queued] += delay
    ex.t3[queued] += delay
    ex.t4[queued] += delay
    err, bound = errors(fit("b", "a", ex), theta, span)
    assert np.all(np.abs(err) <= bound)
    assert np.percentile(np.abs(err), 99) < 10_000


def test_a_clock_step_starts_a_new_segment():
    step_at, jump = EPOCH + 60 * 10**9, 1_000_000

    def theta(g):
        return warp(drift_ppm=20.0)(g) + np.where(g >= step_at, jump, 0)
    ex, span = exchanges(theta)
    result = fit("b", "a", ex, changes=[step_at + int(theta(np.array([step_at]))[0])])
    assert len(result.segments) == 2
    err, bound = errors(result, theta, span)
    assert np.all(np.abs(err) <= bound) and np.percentile(np.abs(err), 99) < 1_000


def test_arithmetic_stays_exact_to_the_ns_at_todays_epoch():
    def theta(g):
        return np.full(len(g), 7, dtype=np.int64)
    ex, span = exchanges(theta, seconds=10, jitter_ns=0)  # symmetric: the midpoint is exact
    err, _ = errors(fit("b", "a", ex), theta, span, n=1000)
    assert np.all(err == 0)


def test_the_bound_is_the_range_of_lines_between_the_points():
    # Lower points 10 us below zero and upper ones 10 us above, at 0 and 100 s: halfway,
    # every line between them gives an offset within 10 us, and a drift within 0.2 ppm.
    x = np.array([0, 100 * 10**9])
    lo, hi, b_lo, b_hi = line_bounds(x, np.array([-10_000, -10_000]), x, np.array([10_000, 10_000]),
                                     50 * 10**9)
    assert (lo, hi) == (-10_000, 10_000) and np.isclose(b_lo, -2e-7) and np.isclose(b_hi, 2e-7)
    assert line_bounds(np.array([0]), np.array([10]), np.array([0]), np.array([-10]), 0) is None


def test_the_daemon_s_plain_python_bound_is_the_offline_fit_s():
    # The gate's bound (no numpy: the daemon runs it) on the gate's 4 s windows of warped,
    # jittered, sometimes inconsistent exchanges, against the vectorised programme.
    compared = infeasible = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        ex, _ = exchanges(warp(drift_ppm=float(rng.uniform(-400, 400))), seconds=4.0,
                          rate_hz=int(rng.integers(2, 40)), seed=seed, jitter_ns=int(rng.integers(1, 50_000)))
        if seed % 5 == 0:  # a reply stamped before its request left: no line fits
            ex.t4[len(ex) // 2] = ex.t1[len(ex) // 2] - 10_000
        t = int(ex.t4[-1]) + int(rng.integers(0, 2_000_000_000))
        vectorised = hard_bounds(ex, t)
        rows = zip(ex.t1.tolist(), ex.t2.tolist(), ex.t3.tolist(), ex.t4.tolist(), strict=True)
        plain = offset_range(rows, t)
        assert plain == (vectorised[:2] if vectorised else None), seed
        compared += 1
        infeasible += vectorised is None
    assert compared == 40 and 0 < infeasible < 40


def test_the_reference_converts_to_itself():
    local = np.array([EPOCH, EPOCH + 1], dtype=np.int64)
    converted, bound = ClockFit.identity("a").to_global(local)
    assert list(converted) == list(local) and list(bound) == [0, 0]


def test_the_merge_s_compiled_conversion_is_the_fit_s_record_for_record():
    step_at = EPOCH + 60 * 10**9

    def theta(g):
        return warp(drift_ppm=20.0)(g) + np.where(g >= step_at, 1_000_000, 0)
    ex, (lo, hi) = exchanges(theta)
    stepped = fit("b", "a", ex, changes=[step_at + int(theta(np.array([step_at]))[0])])
    short = fit("c", "a", exchanges(warp(), seconds=0.2)[0])  # one knot: all drift, on both sides
    rng = np.random.default_rng(5)
    margin = 30 * 10**9  # before the first exchange and after the last: the edge knots' drift
    shuffled = rng.integers(lo - margin, hi + margin, 200_000)
    ordered = np.sort(shuffled)  # the merge's usual order, where the last knot found is tried first
    for result in (stepped, short, fit("d", "a", ex)):
        compiled = CompiledFit.of(result)
        for local in (shuffled, ordered, result.segments[0].at, np.array([], dtype=np.int64)):
            for got, want in zip(compiled.to_global(local), result.to_global(local), strict=True):
                np.testing.assert_array_equal(got, want)
    assert len(stepped.segments) == 2 and len(short.segments[0].knots) == 1
    assert CompiledFit.of(ClockFit.identity("a")) is None
