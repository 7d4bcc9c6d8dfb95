"""Cost of one instrumentation call, against Python's logging module in the same run.

Each case calls the instrumentation point `--calls` times in a plain for loop, `--repeat`
times; the figure is the median over repeats of (loop time - empty loop time) / calls, so
the harness's own loop is not charged to the call. Enabled cases log to a real stream file
on disk, chunk encoding and writes included. Cases:
  event           an enabled event, tag only
  event+data      an enabled event with 16 bytes of extra data
  disabled        a disabled event
  interval        an enabled interval: start() and end(tag), one pair
  counter add     an enabled counter's add()
  logging         baseline: logging.Logger.info writing one formatted line per event to a
                  file through logging.FileHandler, which flushes every line (a tenth of
                  the calls: it is slow, and the figure is per call)
  logging, buffered   the same through a 1 MiB buffer that is not flushed per line: the
                  cost of logging's record and formatting alone
The same enabled event is then measured with the msgpack package as the chunk encoder
instead of msgspec (the bytes are checked to be identical), and the stream file written
by the enabled cases is read back (records per second, raw chunks and Record tuples).
Prints figures for people, then one JSON object as the last line.

    python bench/events.py [--calls 1000000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgpack
import msgspec
from netspec.datastream import writer as streams
from netspec.datastream.instrument import Datastreams
from netspec.datastream.reader import StreamReader
from netspec.datastream.writer import StreamConfig, StreamInfo

TARGET_EVENT_NS, TARGET_DISABLED_NS, TARGET_OVER_LOGGING = 300, 60, 10


def per_call_ns(body: Callable[[int], None], calls: int, repeat: int) -> float:
    """Median over repeats of the net ns per call of `body(calls)`, which runs its own loop."""
    def empty(n: int) -> None:
        for _ in range(n):
            pass

    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        empty(calls)
        t1 = time.perf_counter_ns()
        body(calls)
        t2 = time.perf_counter_ns()
        samples.append(((t2 - t1) - (t1 - t0)) / calls)
    return statistics.median(samples)


def instrumentation_cases(directory: Path, calls: int, repeat: int) -> tuple[dict[str, float], int]:
    ds = Datastreams()
    event, data_event = ds.event("B", "event"), ds.event("B", "data")
    off = ds.event("OFF", "event")
    interval, counter = ds.interval("B", "interval"), ds.counter("B", "counter")
    (path,) = ds.start([StreamConfig("bench", enable=("B",))], StreamInfo(directory, component="bench"),
                       exit_hooks=False)
    payload = bytes(16)

    def events(n: int) -> None:
        log = event.log
        for i in range(n):
            log(i)

    def data_events(n: int) -> None:
        log = data_event.log
        for i in range(n):
            log(i, payload)

    def disabled(n: int) -> None:
        log = off.log
        for i in range(n):
            log(i)

    def intervals(n: int) -> None:
        start, end = interval.start, interval.end
        for i in range(n):
            start()
            end(i)

    def adds(n: int) -> None:
        add = counter.add
        for _ in range(n):
            add(3)

    results = {name: per_call_ns(body, calls, repeat) for name, body in [
        ("event", events), ("event+data", data_events), ("disabled", disabled),
        ("interval", intervals), ("counter add", adds)]}
    ds.stop()
    size = path.stat().st_size
    return results, size // (calls * repeat * 3), path  # the event, event+data and interval records


def read_back(path: Path) -> tuple[float, float, int]:
    """Records per second read back from the stream file: raw chunks (decoded, checked)
    and whole Record tuples (what `ns_control dump` and analysis iterate)."""
    t0 = time.perf_counter()
    raw = sum(len(records) for seq, records in StreamReader(path).chunks() if seq is not None)
    t1 = time.perf_counter()
    count = sum(1 for _ in StreamReader(path))
    t2 = time.perf_counter()
    return raw / (t1 - t0), count / (t2 - t1), count


class _UnflushedHandler(logging.StreamHandler):  # type: ignore[type-arg]
    def flush(self) -> None:
        """Leave the 1 MiB buffer to fill."""


def logging_case(directory: Path, calls: int, repeat: int, buffered: bool = False) -> float:
    logger = logging.getLogger(f"bench.events.{buffered}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    handler = (_UnflushedHandler(open(directory / "buffered.log", "w", buffering=1 << 20))  # noqa: SIM115
               if buffered else logging.FileHandler(directory / "bench.log"))
    handler.setFormatter(logging.Formatter("%(created).9f %(name)s %(message)s"))
    logger.addHandler(handler)

    def lines(n: int) -> None:
        info = logger.info
        for i in range(n):
            info("B/event tag %d", i)

    try:
        return per_call_ns(lines, calls, repeat)
    finally:
        logger.removeHandler(handler)
        handler.close()
        if buffered:
            handler.stream.close()


def msgpack_encoder_case(directory: Path, calls: int, repeat: int) -> tuple[float, bool]:
    """The enabled event with msgpack.Packer as the chunk encoder; and whether the two
    encoders give the same bytes for a chunk."""
    chunk = [(17, time.time_ns(), i) for i in range(4096)]
    same = msgpack.Packer().pack(chunk) == msgspec.msgpack.Encoder().encode(chunk)
    original = streams._encode
    # The writer's own records (namespace, close) are schema.py's Structs, which msgpack
    # takes as the arrays msgspec would write.
    streams._encode = msgpack.Packer(default=msgspec.to_builtins).pack
    try:
        ds = Datastreams()
        event = ds.event("B", "event")
        ds.start([StreamConfig("msgpack", enable=("B",))], StreamInfo(directory, component="msgpack"),
                 exit_hooks=False)

        def events(n: int) -> None:
            log = event.log
            for i in range(n):
                log(i)
        ns = per_call_ns(events, calls, repeat)
        ds.stop()
    finally:
        streams._encode = original
    return ns, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        directory = Path(tmp)
        logging_ns = logging_case(directory, max(1, args.calls // 10), args.repeat)
        buffered_ns = logging_case(directory, max(1, args.calls // 10), args.repeat, buffered=True)
        cases, record_bytes, stream = instrumentation_cases(directory, args.calls, args.repeat)
        raw_rate, record_rate, records = read_back(stream)
        msgpack_ns, same_bytes = msgpack_encoder_case(directory, args.calls, args.repeat)
    print(f"{args.calls} calls x {args.repeat} repeats; ns per call net of the empty loop "
          "(median over repeats)")
    print(f"  {'logging.info, one line (baseline)':<36} {logging_ns:8.1f} ns")
    print(f"  {'logging.info, buffered, no flush':<36} {buffered_ns:8.1f} ns")
    for name, ns in cases.items():
        print(f"  {name:<36} {ns:8.1f} ns   {logging_ns / ns:6.1f} x faster than logging "
              f"({buffered_ns / ns:.1f} x buffered)")
    print(f"  {'event, msgpack encoder instead':<36} {msgpack_ns:8.1f} ns   "
          f"(msgspec: {cases['event']:.1f} ns; same bytes: {same_bytes})")
    print(f"  read back ({records} records): {raw_rate / 1e6:.2f} M records/s as raw chunks, "
          f"{record_rate / 1e6:.2f} M records/s as Records")
    print(f"  enabled event rate: {1e9 / cases['event'] / 1e6:.2f} M events/s; "
          f"{record_bytes} bytes per record on disk (mean of event, event+data, interval)")
    checks = [("enabled event", cases["event"] <= TARGET_EVENT_NS, f"<= {TARGET_EVENT_NS} ns"),
              ("disabled event", cases["disabled"] <= TARGET_DISABLED_NS, f"<= {TARGET_DISABLED_NS} ns"),
              ("vs logging", logging_ns / cases["event"] >= TARGET_OVER_LOGGING,
               f">= {TARGET_OVER_LOGGING}x faster")]
    for what, ok, target in checks:
        print(f"target: {what} {target}: {'met' if ok else 'NOT met'}")
    result = {f"{name.replace(' ', '_').replace('+', '_')}_ns": round(ns, 1) for name, ns in cases.items()}
    result.update(logging_ns=round(logging_ns, 1), logging_buffered_ns=round(buffered_ns, 1),
                  event_msgpack_encoder_ns=round(msgpack_ns, 1),
                  encoders_same_bytes=same_bytes, event_over_logging=round(logging_ns / cases["event"], 1),
                  mean_record_bytes=record_bytes, read_raw_records_per_s=round(raw_rate),
                  read_records_per_s=round(record_rate))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
