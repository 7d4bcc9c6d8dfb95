"""run.json of a large run, written and read through the typed record against plain JSON.

A record of HOSTS hosts with one component each, through STEPS steps (every participant's
entry as a real run writes it), is written with protocol/runrecord.py's `encode` and read
back with `read_run` (decoded into the Structs, its format checked, the journals folded),
against `json.dumps` / `json.loads` of the same values: the baseline, measured in the same run.

    python bench/record.py [--hosts 1000] [--steps 10] [--repeat 7]

Prints the best of --repeat for each, the ratios, then one JSON object as its last line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import msgspec
from netspec.protocol.runrecord import RUN_FORMAT, RunRecord, encode, read_run
from netspec.protocol.runstep import Entry, Step, StepHost

T0 = 1_795_000_000_000_000_000


def record(hosts: int, steps: int) -> RunRecord:
    def entry(i: int, s: int) -> Entry:
        at = T0 + s * 10**9 + i * 1000
        return Entry("ok", "", entered_ns=at, acked_ns=at + 5000, started_ns=at + 100, start_ns=at + 7,
                     program_start_ns=at + 107, start_bound_ns=900, received_ns=at + 9000, outcome="ok")
    return RunRecord(
        format=RUN_FORMAT, id="20261126T000000Z-bench0", experiment="bench", status="ok", started_ns=T0,
        steps=[Step(f"phase{s}", "ok", entered_ns=T0 + s * 10**9, left_ns=T0 + s * 10**9 + 10**8,
                    duration_s=0.1, hosts={f"h{i}": StepHost(components={f"c{i}": entry(i, s)},
                                                             sent_ns=T0 + s * 10**9)
                                           for i in range(hosts)})
               for s in range(steps)])


def best(repeat: int, work) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    typed = record(args.hosts, args.steps)
    plain = msgspec.to_builtins(typed)
    with tempfile.TemporaryDirectory(prefix="netspec-bench-record-") as tmp:
        run = Path(tmp)
        data = encode(typed)
        (run / "run.json").write_bytes(data)
        text = json.dumps(plain)
        figures = {
            "write_typed_ms": best(args.repeat, lambda: encode(typed)) * 1e3,
            "write_json_ms": best(args.repeat, lambda: json.dumps(plain)) * 1e3,
            "read_typed_ms": best(args.repeat, lambda: read_run(run)) * 1e3,
            "read_json_ms": best(args.repeat, lambda: json.loads((run / "run.json").read_bytes())) * 1e3,
            "bytes_typed": len(data), "bytes_json": len(text.encode()),
        }
        assert read_run(run) == typed  # what is read is what was written, every value
    print(f"run.json of {args.hosts} hosts x {args.steps} steps ({figures['bytes_typed'] / 1e6:.2f} MB; "
          f"plain JSON {figures['bytes_json'] / 1e6:.2f} MB), best of {args.repeat}:")
    print(f"  write: typed {figures['write_typed_ms']:.1f} ms, json.dumps {figures['write_json_ms']:.1f} ms "
          f"({figures['write_json_ms'] / figures['write_typed_ms']:.1f}x)")
    print(f"  read:  typed and checked {figures['read_typed_ms']:.1f} ms, json.loads "
          f"{figures['read_json_ms']:.1f} ms ({figures['read_json_ms'] / figures['read_typed_ms']:.1f}x)")
    print(json.dumps({"bench": "record", "hosts": args.hosts, "steps": args.steps,
                      **{k: round(v, 2) for k, v in figures.items()}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
