"""What the operations tests share: a real run directory of two clients' operations, written
through nodelib's entity (its clock given, so the times are the test's), in a steady step and
a partition step, with a log histogram record of each client."""

from __future__ import annotations

import json
from pathlib import Path

from netspec.datastream.instrument import Datastreams
from netspec.datastream.schema import HistogramRecord
from netspec.datastream.writer import StreamConfig, StreamInfo

T0 = 1_700_000_000_000_000_000
MS = 1_000_000
STEADY = (T0, T0 + 1000 * MS)
PARTITION = (T0 + 1000 * MS, T0 + 2000 * MS)
RATE_GAP = 10 * MS  # an operation intended every 10 ms


def client_stream(directory: Path, host: str, outcomes, values) -> None:
    """A client's stream: operations (intended, start, end, outcome, cause) and one log
    histogram record of `values`, logged in the steady step."""
    ds = Datastreams()
    op = ds.operation("KV", "put")
    hist = ds.histogram("KV", "put_ns", 1_000, 10_000_000_000, relative_error=0.01)
    ds.start([StreamConfig("kv", enable=("KV",), chunk_records=500)],
             StreamInfo(directory, run="r", host=host, component="client"), exit_hooks=False)
    for intended, start, end, outcome, cause in outcomes:
        getattr(op, outcome)(start, cause, intended_ns=intended, clock=lambda end=end: end)
    for v in values:
        hist.add(v)
    ds.streams[0].put(HistogramRecord(hist.id, STEADY[0] + 500 * MS, hist.counts(), sum(values)))
    ds.stop()


def partitioned_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    c1, c2 = [], []
    for k in range(100):  # steady: every operation ok in 1 ms, c2's pacer 2 ms late on each
        t = STEADY[0] + k * RATE_GAP
        c1.append((t, t, t + MS, "ok", None))
        c2.append((t, t + 2 * MS, t + 3 * MS, "ok", None))
    for k in range(100):  # partition: c1 times out for 300 ms (30 operations), c2 refused on 10
        t = PARTITION[0] + k * RATE_GAP
        c1.append((t, t, t + 1000 * MS, "timed_out", "no reply in 1 s") if k < 30
                  else (t, t, t + MS, "ok", None))
        c2.append((t, t, t + MS, "failed", "refused") if k % 10 == 0 else (t, t, t + MS, "ok", None))
    client_stream(run / "hosts" / "c1" / "streams", "c1", c1, [1_500] * 90 + [150_000_000] * 10)
    client_stream(run / "hosts" / "c2" / "streams", "c2", c2, [2_500] * 100)
    steps = [{"phase": phase, "status": "ok", "hosts": {h: {"components": {"client": {
        "status": "ok", "entered_ns": lo, "acked_ns": hi - 1}}} for h in ("c1", "c2")}}
        for phase, (lo, hi) in (("steady", STEADY), ("partition", PARTITION))]
    (run / "run.json").write_text(json.dumps({"format": 1, "id": "r", "experiment": "kv", "status": "ok",
                                              "plan": {"source": str(tmp_path / "exp.yaml")},
                                              "hosts": {}, "steps": steps}))
    return run
