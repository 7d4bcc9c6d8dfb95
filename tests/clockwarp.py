"""A clock's true offset from the global timeline for tests of the fit: a fixed offset,
a drift and a slow sinusoidal wander."""

import numpy as np

EPOCH = 1_795_000_000_000_000_000  # late 2026: a float64 has 256 ns steps here


def warp(offset_ns=123_456_789, drift_ppm=50.0, wander_ppm=0.5, period_s=60.0):
    def theta(g):
        s = (g - EPOCH) / 1e9
        amplitude_ns = wander_ppm * 1e-6 * period_s / (2 * np.pi) * 1e9
        return np.round(offset_ns + drift_ppm * 1e-6 * (g - EPOCH)
                        + amplitude_ns * np.sin(2 * np.pi * s / period_s)).astype(np.int64)
    return theta
