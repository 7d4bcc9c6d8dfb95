"""Load that measures honestly: the pacer's accuracy, an operation's logging cost, and log
histograms merged over many hosts.

  pacer       nodelib.Pacer at 1k and 10k operations/s (constant arrivals) for `--seconds`,
              each instant's operation logged: how late each actual start was against its
              intended instant (p50, p99, max), and how many started more than 1 ms late.
  cost        one operation logged, start() then ok(t) / failed(t, cause) /
              timed_out(t, cause), against an interval's start() and end(tag) and an
              event's log(tag) in the same run (bench/events.py's harness: the median over
              repeats of the loop's time net of an empty loop). The budget: an operation
              (start and end) within 1.5 x an interval's in the same run and within twice an
              event's target (bench/events.py, 300 ns, an idle machine's), and a failure
              within 15 % of a success (with its cause and without; a success given a
              cause is measured too, to tell the outcome's cost from the text's).
  merge       `--hosts` hosts of `--values` latencies each (log-normal, a tail at 1 %), each
              counted in its own log histogram entity (1 % relative error); the hosts'
              histograms merged, in Python (datastream/loghist.merge) and as the analysis does
              from events.parquet's rows (analysis/histograms.merge_rows): the merged counts
              against one histogram of every value (exact: equal), its p50/p99/p99.9 against
              numpy's of the values themselves (within the bound), and the mean of the
              hosts' own p99s beside (what averaging percentiles would report).
Prints figures for people, then one JSON object as the last line.

    python bench/load.py [--seconds 2] [--calls 200000] [--repeat 5] [--hosts 1000] [--values 1000]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import msgspec
import numpy as np
from events import TARGET_EVENT_NS, per_call_ns
from netspec.analysis.histograms import merge_rows
from netspec.datastream.instrument import Datastreams
from netspec.datastream.loghist import merge, quantile
from netspec.datastream.writer import StreamConfig, StreamInfo
from netspec.nodelib import Pacer

RATES = (1_000, 10_000)
TARGET_OP_NS = 2 * TARGET_EVENT_NS  # on the machine bench/events.py's target is for
TARGET_OP_OVER_INTERVAL = 1.5  # start() and an end, against an interval's in the same run
TARGET_FAILED_OVER_OK = 1.15
LO, HI, ERROR = 1_000, 100_000_000_000, 0.01


def streams(directory: Path, name: str) -> Datastreams:
    ds = Datastreams()
    ds.start([StreamConfig(name, enable=("B",))], StreamInfo(directory, component=name), exit_hooks=False)
    return ds


def pacer_case(directory: Path, rate: int, seconds: float) -> dict[str, float]:
    ds = streams(directory, f"pacer{rate}")
    op = ds.operation("B", "op")
    pacer = Pacer(rate, seconds, keep_lags=True)
    for instant in pacer:
        op.ok(op.start(), intended_ns=instant)
    ds.stop()
    lags = np.array(pacer.lags, dtype=float)
    return {"issued": pacer.issued, "p50_us": float(np.percentile(lags, 50)) / 1e3,
            "p99_us": float(np.percentile(lags, 99)) / 1e3, "max_us": float(lags.max()) / 1e3,
            "late": pacer.late, "kept_up": not pacer.fell_behind}


def cost_cases(directory: Path, calls: int, repeat: int) -> dict[str, float]:
    ds = streams(directory, "cost")
    op, interval, event = ds.operation("B", "op"), ds.interval("B", "interval"), ds.event("B", "event")

    def ok(n: int) -> None:
        start, end = op.start, op.ok
        for _ in range(n):
            end(start())

    def failed(n: int) -> None:
        start, end = op.start, op.failed
        for _ in range(n):
            end(start(), "refused")

    def failed_bare(n: int) -> None:
        start, end = op.start, op.failed
        for _ in range(n):
            end(start())

    def ok_with_cause(n: int) -> None:
        start, end = op.start, op.ok
        for _ in range(n):
            end(start(), "refused")

    def timed_out(n: int) -> None:
        start, end = op.start, op.timed_out
        for _ in range(n):
            end(start(), "no reply in 1 s")

    def paced_ok(n: int) -> None:
        start, end = op.start, op.ok
        for _ in range(n):
            t = start()
            end(t, None, t - 1000)

    def intervals(n: int) -> None:
        start, end = interval.start, interval.end
        for i in range(n):
            start()
            end(i)

    def events(n: int) -> None:
        log = event.log
        for i in range(n):
            log(i)

    cases = [("operation ok", ok), ("operation failed", failed), ("operation failed, no cause", failed_bare),
             ("operation ok, a cause", ok_with_cause), ("operation timed out", timed_out),
             ("operation ok, paced", paced_ok), ("interval (baseline)", intervals),
             ("event (baseline)", events)]
    # Interleaved repeats: a machine's drift in speed falls on every case alike.
    samples: dict[str, list[float]] = {name: [] for name, _ in cases}
    for _ in range(repeat):
        for name, body in cases:
            samples[name].append(per_call_ns(body, calls, 1))
    ds.stop()
    return {name: statistics.median(v) for name, v in samples.items()}


def merge_case(directory: Path, hosts: int, values: int) -> dict[str, float | bool]:
    rng = np.random.default_rng(51)
    per_host = []
    for _ in range(hosts):
        v = rng.lognormal(math.log(200_000), 0.5, values)  # ~200 us
        tail = rng.random(values) < 0.01
        v[tail] = rng.uniform(50e6, 250e6, int(tail.sum()))  # a stall's 50-250 ms
        per_host.append(v)
    # A host's histogram is an entity of its own, enabled in a real stream (its record logged).
    ds = streams(directory, "merge")
    every_value = ds.histogram("B", "all", LO, HI, relative_error=ERROR)
    spec = every_value.spec
    counted, rows = [], []
    t0 = time.perf_counter()
    for i, v in enumerate(per_host):
        h = ds.histogram("B", f"host{i}", LO, HI, relative_error=ERROR)
        for x in v.tolist():
            h.add(x)
        h.log()
        counted.append(h.counts())
        rows.append((f"host{i}/c", msgspec.json.encode({"counts": counted[-1], "sum": 0, **spec}).decode()))
    add_s = time.perf_counter() - t0
    for v in per_host:
        for x in v.tolist():
            every_value.add(x)
    whole = every_value.counts()
    ds.stop()  # (which zeroes the entities' counts: they were taken before)
    t0 = time.perf_counter()
    _, python_counts = merge((spec, c) for c in counted)
    python_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    scale, numpy_counts, _, sources = merge_rows(rows)
    rows_s = time.perf_counter() - t0
    truth = np.concatenate(per_host)
    out: dict[str, float | bool] = {
        "hosts": hosts, "values": len(truth), "buckets": scale.buckets,
        "bound_pct": 100 * scale.relative_error,
        "exact": python_counts == whole == numpy_counts.tolist() and sources == hosts,
        "merge_python_ms": python_s * 1e3, "merge_rows_ms": rows_s * 1e3, "add_ns": add_s / len(truth) * 1e9}
    for label, q in (("p50", 0.5), ("p99", 0.99), ("p99_9", 0.999)):
        got = quantile(scale, python_counts, q)
        exact = float(np.sort(truth)[math.ceil(q * len(truth)) - 1])
        out[f"{label}_ms"], out[f"{label}_true_ms"] = got.value / 1e6, exact / 1e6
        out[f"{label}_error_pct"] = 100 * abs(got.value - exact) / exact
    out["mean_of_host_p99s_ms"] = float(np.mean([np.percentile(v, 99) for v in per_host])) / 1e6
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="each pacer rate's run")
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--values", type=int, default=1000, help="latencies a host")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        directory = Path(tmp)
        pacing = {rate: pacer_case(directory, rate, args.seconds) for rate in RATES}
        cost = cost_cases(directory, args.calls, args.repeat)
        merged = merge_case(directory, args.hosts, args.values)
    print(f"pacer, constant arrivals for {args.seconds:g} s, each operation logged; "
          "lag = actual start - intended")
    for rate, p in pacing.items():
        print(f"  {rate:>6}/s: {p['issued']} issued, lag p50 {p['p50_us']:.1f} us, p99 {p['p99_us']:.1f} us, "
              f"max {p['max_us']:.1f} us; {p['late']} more than 1 ms late"
              + ("" if p["kept_up"] else " (it says it fell behind)"))
    print(f"one operation logged, start() + end ({args.calls} calls x {args.repeat} repeats, ns net of the "
          "empty loop, median)")
    for name, ns in cost.items():
        print(f"  {name:<28} {ns:7.1f} ns   {ns / cost['interval (baseline)']:.2f} x an interval")
    failed_over_ok = cost["operation failed"] / cost["operation ok"]
    bare_over_ok = cost["operation failed, no cause"] / cost["operation ok"]
    cause_over_ok = cost["operation ok, a cause"] / cost["operation ok"]
    print(f"  a failure with its cause costs {failed_over_ok:.2f} x a success; without one "
          f"{bare_over_ok:.2f} x; a success given the same cause {cause_over_ok:.2f} x "
          "(the cause's text is the difference)")
    print(f"log histograms: {merged['hosts']} hosts x {args.values} latencies, {merged['buckets']} bins "
          f"({merged['bound_pct']:.2g} % bound), counted at {merged['add_ns']:.0f} ns a value")
    print(f"  merged exactly (bin by bin equal to one histogram of every value): {merged['exact']}")
    print(f"  merge time: {merged['merge_python_ms']:.1f} ms in Python, {merged['merge_rows_ms']:.1f} ms "
          "from events.parquet's JSON rows (analysis)")
    for label in ("p50", "p99", "p99_9"):
        print(f"  {label.replace('_', '.'):<6} merged {merged[f'{label}_ms']:.3f} ms, of the values "
              f"{merged[f'{label}_true_ms']:.3f} ms: {merged[f'{label}_error_pct']:.2f} % off")
    print(f"  the hosts' own p99s averaged: {merged['mean_of_host_p99s_ms']:.3f} ms "
          "(not a percentile of anything)")
    over_interval = max(cost["operation ok"], cost["operation failed"]) / cost["interval (baseline)"]
    checks = [("operation vs interval", over_interval <= TARGET_OP_OVER_INTERVAL,
               f"<= {TARGET_OP_OVER_INTERVAL}x"),
              ("operation ok", cost["operation ok"] <= TARGET_OP_NS, f"<= {TARGET_OP_NS} ns"),
              ("operation failed", cost["operation failed"] <= TARGET_OP_NS, f"<= {TARGET_OP_NS} ns"),
              ("failure vs success, neither with a cause", bare_over_ok <= TARGET_FAILED_OVER_OK,
               f"<= {TARGET_FAILED_OVER_OK}x"),
              ("failure with a cause vs success", failed_over_ok <= TARGET_FAILED_OVER_OK,
               f"<= {TARGET_FAILED_OVER_OK}x"),
              ("merge exact", merged["exact"], "equal counts"),
              ("percentiles", all(merged[f"{q}_error_pct"] <= merged["bound_pct"]
                                  for q in ("p50", "p99", "p99_9")), f"within {merged['bound_pct']:.2g} %")]
    for what, ok, target in checks:
        print(f"target: {what} {target}: {'met' if ok else 'NOT met'}")
    result = {f"pacer_{rate}_{k}": round(v, 1) if isinstance(v, float) else v
              for rate, p in pacing.items() for k, v in p.items()}
    result.update({name.replace(" (baseline)", "").replace(", ", "_").replace(" ", "_") + "_ns":
                   round(ns, 1) for name, ns in cost.items()})
    result.update(failed_over_ok=round(failed_over_ok, 2), failed_bare_over_ok=round(bare_over_ok, 2),
                  ok_with_cause_over_ok=round(cause_over_ok, 2),
                  operation_over_interval=round(over_interval, 2),
                  **{f"merge_{k}": round(v, 3) if isinstance(v, float) else v for k, v in merged.items()},
                  targets_met=all(ok for _, ok, _ in checks))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
