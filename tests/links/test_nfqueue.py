import random
import statistics

from netspec.links.nfqueue import drop, jitter_ms
from netspec.protocol.links import DISTRIBUTIONS, LinkCondition

N = 100_000


def test_bursty_loss_has_the_asked_loss_rate_and_mean_burst_length():
    rng, cond, bad = random.Random(7), LinkCondition(loss_pct=5, loss_burst=4), False
    lost = []
    for _ in range(N):
        gone, bad = drop(rng, cond, bad)
        lost.append(gone)
    bursts, run = [], 0
    for gone in lost:
        if gone:
            run += 1
        elif run:
            bursts.append(run)
            run = 0
    assert abs(sum(lost) / N - 0.05) < 0.005
    assert abs(statistics.fmean(bursts) - 4) < 0.3


def test_independent_loss_is_drawn_packet_by_packet():
    rng, cond = random.Random(3), LinkCondition(loss_pct=1)
    lost = [drop(rng, cond, False)[0] for _ in range(N)]
    assert abs(sum(lost) / N - 0.01) < 0.002
    assert not any(drop(rng, LinkCondition(delay_ms=5), False)[0] for _ in range(1000))


def test_every_distribution_of_jitter_is_centred_with_the_asked_spread():
    for distribution in DISTRIBUTIONS:
        rng = random.Random(11)
        draws = [jitter_ms(rng, distribution, 2.0) for _ in range(N)]
        spread = statistics.pstdev(draws)
        assert abs(statistics.fmean(draws)) < 0.05, distribution
        # uniform's is the half-width of its interval (sd = 2/sqrt(3)); the others' the sd
        assert abs(spread - (2.0 / 3 ** 0.5 if distribution == "uniform" else 2.0)) < 0.1, distribution
