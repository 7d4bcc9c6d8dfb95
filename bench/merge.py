"""The merge's speed and memory: raw streams of 4 hosts x N events -> clock-corrected,
merged Parquet (merged/events.parquet), in a child process whose peak RSS is measured;
beside it, in the same run, reading the same files record by record (StreamReader, one
Python object per record) as the baseline, and the merge's two stages apart (decoding and
merging; Parquet encoding). Prints figures for people, then one JSON object.

    python bench/merge.py [--events 5000000]   # per host
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from netspec.analysis.batch import Batch, Counts, Dictionaries
from netspec.analysis.sinks import EventsSink
from netspec.analysis.source import FileSource
from netspec.analysis.timeline import merge, merge_files
from netspec.clksync.fit import ClockFit, Exchanges, fit
from netspec.datastream.instrument import Datastreams
from netspec.datastream.reader import StreamReader
from netspec.datastream.writer import StreamConfig, StreamInfo

HOSTS = ("a", "b", "c", "d")
OFFSETS = {"a": 0, "b": 2_000_000, "c": -3_000_000, "d": 7_000_000}
RATE_NS = 100_000
START_NS = 1_700_000_000_000_000_000  # before now: each file's close record comes last


def write_host(directory: Path, host: str, events: int, start_ns: int) -> Path:
    """`events` events 100 us apart in this host's clock (10,000 a second, as a busy
    application logs), through the real writer; the clock is the logging call's own
    argument, so the run's time span is real without taking that long."""
    ds = Datastreams()
    tick, send = ds.event("B", "tick"), ds.event("B", "send")
    (path,) = ds.start([StreamConfig("b", enable=("B",))],
                       StreamInfo(directory, run="bench", host=host, component="app"), exit_hooks=False)
    log_tick, log_send = tick.log, send.log
    clock = itertools.count(start_ns + OFFSETS[host], RATE_NS).__next__
    for i in range(events):
        if i % 10:
            log_tick(i, None, clock)
        else:
            log_send(i, i, clock)  # one in ten carries data
    ds.stop()
    return path


def fits(span_ns: tuple[int, int]) -> dict[str, ClockFit]:
    """Each host's fit from exchanges every 100 ms over the files' span, offsets as in OFFSETS."""
    rng, out = random.Random(1), {"a": ClockFit.identity("a")}
    for host in HOSTS[1:]:
        rows = []
        for g1 in range(span_ns[0] - 10**9, span_ns[1] + 10**9, 100_000_000):
            g2 = g1 + rng.randint(20_000, 40_000)
            g4 = g2 + 5_000 + rng.randint(20_000, 40_000)
            rows.append((g1 + OFFSETS[host], g2, g2 + 5_000, g4 + OFFSETS[host], True))
        out[host] = fit(host, "a", Exchanges.from_rows(rows))
    return out


def cpu_seconds() -> float:
    """This process's CPU time, all threads. It moves less than the wall clock on a VM whose
    hypervisor takes the CPU at times: stolen time is nobody's."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def merge_child(directory: Path) -> None:
    paths = sorted(directory.glob("*/*.ds"))
    files = {p.parent.name: [p] for p in paths}
    events = int(directory.joinpath("events").read_text())
    t0 = time.perf_counter()
    clock = fits((START_NS, START_NS + events * RATE_NS))
    t1, cpu1 = time.perf_counter(), cpu_seconds()
    counts = merge_files(files, clock, directory / "merged")
    elapsed, cpu = time.perf_counter() - t1, cpu_seconds() - cpu1
    print(json.dumps({"records": counts.records, "seconds": elapsed, "fit_seconds": t1 - t0,
                      "cpu_seconds": cpu,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "late": counts.late, "warnings": counts.warnings}))


def stages_child(directory: Path) -> None:
    """The merge's two stages apart on the same files, each streaming as in the merge:
    decoding and merging with nothing written, then Parquet encoding of batches merged
    beforehand. Both after a first pass, so numba's loading of the scanner is not in them."""
    files = {p.parent.name: [p] for p in sorted(directory.glob("*/*.ds"))}
    events = int(directory.joinpath("events").read_text())
    clock = fits((START_NS, START_NS + events * RATE_NS))

    def merged() -> tuple[Dictionaries, Iterator[Batch]]:
        names, counts = Dictionaries(), Counts()
        sources = [FileSource(p, h, clock.get(h), names, counts) for h, ps in files.items() for p in ps]
        return names, merge(sources, counts)

    for _ in merged()[1]:
        break
    t0 = time.perf_counter()
    records = sum(len(b) for b in merged()[1])
    decode = time.perf_counter() - t0
    names, batches = merged()
    kept = list(batches)
    t0 = time.perf_counter()
    sink = EventsSink(directory / "stages.parquet", names)
    for batch in kept:
        sink.write(batch)
    sink.close()
    encode = time.perf_counter() - t0
    print(json.dumps({"decode_merge_per_s": records / decode, "parquet_per_s": records / encode}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=5_000_000, help="per host")
    parser.add_argument("--merge-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--stages-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.merge_child:
        merge_child(args.merge_child)
        return
    if args.stages_child:
        stages_child(args.stages_child)
        return
    with tempfile.TemporaryDirectory(prefix="merge-bench-") as tmp:
        directory = Path(tmp)
        t0 = time.perf_counter()
        paths = [write_host(directory / h, h, args.events, START_NS) for h in HOSTS]
        directory.joinpath("events").write_text(str(args.events))
        written = time.perf_counter() - t0
        os.sync()  # the files' writeback to disk is the writing's cost, not the merge's
        size = sum(p.stat().st_size for p in paths)
        print(f"{len(HOSTS)} hosts x {args.events:,} events: {size / 1e6:.0f} MB of streams "
              f"(written in {written:.1f} s)")
        done = subprocess.run([sys.executable, __file__, "--merge-child", str(directory)],
                              capture_output=True, text=True, check=True)
        merged = json.loads(done.stdout.strip().splitlines()[-1])
        rate = merged["records"] / merged["seconds"]
        out = (directory / "merged" / "events.parquet").stat().st_size
        print(f"  clock fits of 3 hosts (clksync's part, {merged['fit_seconds']:.1f} s) are not counted")
        print(f"  merge -> events.parquet: {merged['records']:,} records in {merged['seconds']:.1f} s = "
              f"{rate / 1e6:.2f} M records/s, peak RSS {merged['peak_rss_mb']:.0f} MB, "
              f"Parquet {out / 1e6:.0f} MB")
        print(f"  CPU time of the merge, all threads: {merged['cpu_seconds']:.1f} s = "
              f"{merged['cpu_seconds'] / merged['records'] * 1e9:.0f} ns a record")
        done = subprocess.run([sys.executable, __file__, "--stages-child", str(directory)],
                              capture_output=True, text=True, check=True)
        stages = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"  stages apart: decoding and merging {stages['decode_merge_per_s'] / 1e6:.2f} M records/s, "
              f"Parquet encoding {stages['parquet_per_s'] / 1e6:.2f} M records/s")
        t0, n = time.perf_counter(), 0
        for p in paths[:1]:  # one host's file is enough for a rate
            for _ in StreamReader(p):
                n += 1
        baseline = n / (time.perf_counter() - t0)
        print(f"  baseline, reading one host's file record by record: {baseline / 1e6:.2f} M records/s "
              f"(the merge is {rate / baseline:.1f}x that, with clock conversion, ordering and Parquet)")
    print(json.dumps({"bench": "merge", "hosts": len(HOSTS), "events_per_host": args.events,
                      "records": merged["records"], "seconds": round(merged["seconds"], 2),
                      "fit_seconds": round(merged["fit_seconds"], 2),
                      "cpu_seconds": round(merged["cpu_seconds"], 2),
                      "records_per_s": round(rate), "peak_rss_mb": round(merged["peak_rss_mb"]),
                      "baseline_records_per_s": round(baseline), "speedup": round(rate / baseline, 2),
                      "late": merged["late"], "decode_merge_per_s": round(stages["decode_merge_per_s"]),
                      "parquet_per_s": round(stages["parquet_per_s"])}))


if __name__ == "__main__":
    main()
