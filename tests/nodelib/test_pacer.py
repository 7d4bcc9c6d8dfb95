"""nodelib.Pacer: the instants it yields are fixed before the operations run (a late
operation moves none of the later ones), it says how far behind it fell, and its params
are checked; an operation's record keeps its outcome, cause and lag, its latency counted
from the intended instant, and a disabled one logs nothing yet still says its latency."""

from __future__ import annotations

import itertools
import time

import pytest
from netspec import nodelib
from netspec.datastream.instrument import Datastreams
from netspec.datastream.reader import StreamReader
from netspec.datastream.writer import StreamConfig, StreamInfo


def test_a_constant_pacers_instants_stay_on_schedule_when_an_operation_runs_late():
    pacer = nodelib.Pacer(100, 0.3)
    instants = []
    for instant in pacer:
        instants.append(instant)
        if len(instants) == 5:
            time.sleep(0.05)  # this operation holds the loop for 5 instants' worth
    gaps = {b - a for a, b in itertools.pairwise(instants)}
    assert len(instants) == 30 and gaps <= {10_000_000, 10_000_001, 9_999_999}
    assert pacer.late >= 4 and pacer.worst_lag_ns >= 30_000_000 and pacer.worst_at == 5
    assert pacer.fell_behind
    assert pacer.behind().startswith(f"pacer fell behind its constant 100/s: {pacer.late} of 30 operations "
                                     "started more than 1 ms late, the worst")


def test_poisson_arrivals_repeat_with_their_seed_and_average_the_rate():
    def gaps(seed):
        instants = list(nodelib.Pacer(2000, 0.5, "poisson", seed=seed))
        return [b - a for a, b in itertools.pairwise(instants)]
    first, again = gaps(7), gaps(7)
    assert first == again and len(set(first)) > 100
    assert 400_000 < sum(first) / len(first) < 600_000  # 1/2000 s = 500 us on average


def test_params_set_the_pacer_and_a_closed_loop_yields_no_instants():
    assert nodelib.Pacer.from_params({"rate": 50, "duration_s": 1}).arrivals == "constant"
    closed = nodelib.Pacer.from_params({"duration_s": 0.05})
    assert not closed.open_loop and set(closed) == {None} and closed.issued > 0
    with pytest.raises(nodelib.NetspecError, match="'burst' is not one of constant, poisson, closed"):
        nodelib.Pacer.from_params({"rate": 5, "arrivals": "burst"})
    with pytest.raises(nodelib.NetspecError, match="poisson arrivals need a rate > 0"):
        nodelib.Pacer.from_params({"arrivals": "poisson"})


def test_an_operations_record_keeps_its_outcome_cause_and_lag_and_a_disabled_one_logs_nothing(tmp_path):
    ds = Datastreams()
    op = ds.operation("OP", "get")
    off = ds.operation("OFF", "get")
    (path,) = ds.start([StreamConfig("s", enable=("OP",))], StreamInfo(tmp_path, component="c"),
                       exit_hooks=False)
    assert op.ok(1_000, intended_ns=400, clock=lambda: 5_000) == 4_600
    assert op.failed(6_000, "refused", clock=lambda: 6_500) == 500
    # Started before its instant (a pacer's caller ran early): counted from its start, no lag.
    assert op.unknown(7_000, "reset", intended_ns=9_000, clock=lambda: 9_500) == 2_500
    assert off.timed_out(off.start(), "deadline") >= 0 and not off.enabled
    ds.stop()
    with StreamReader(path) as reader:
        records = [(r.ts, r.tag, r.start, r.value) for r in reader if r.entity.kind == "operation"]
    assert records == [
        (5_000, 0, 400, {"outcome": "ok", "latency_ns": 4_600, "lag_ns": 600, "cause": None}),
        (6_500, 1, 6_000, {"outcome": "failed", "latency_ns": 500, "lag_ns": 0, "cause": "refused"}),
        (9_500, 3, 7_000, {"outcome": "unknown", "latency_ns": 2_500, "lag_ns": 0, "cause": "reset"})]
