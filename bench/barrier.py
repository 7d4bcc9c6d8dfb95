"""One barrier step (enter + every ack) over 1, 10 and 100 local daemons, real processes.

Two kinds of step go through the real phase engine, `--steps` of each, and each step's
time (enter sent -> last ack in) is read from the run's record:
  node:      a node-wide step (start_logging) that every daemon acks itself, opening its
             node stream; each daemon's one component is a plain command, so no
             component takes part;
  component: an application phase (tick) that each daemon forwards to its one
             NETSPEC-aware component.
Baseline, measured in the same run: the round trip of a bare asyncio TCP echo over
loopback, client and server in separate processes as the controller and a daemon are.
Prints figures for people, then one JSON object as the last line.

    python bench/barrier.py [--daemons 1,10,100] [--steps 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from netspec.controller.engine.run import Run
from netspec.controller.experiment.load import parse
from netspec.controller.record.rundir import RunDir
from netspec.protocol.auth import load_or_create_key

HERE = Path(__file__).resolve().parent
ECHO_SERVER = """
import asyncio, sys
async def echo(r, w):
    while data := await r.read(65536):
        w.write(data)
async def main():
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measured_apart(script: str, **options: int | bool) -> dict[str, Any]:
    """The JSON object bench `script` prints last, run in a process of its own: a bench that
    forks must not fork a caller that has threads (it would copy them half-done). An option
    True is a flag given, False one left out."""
    argv = [sys.executable, script, *(f"--{name}" if value is True else f"--{name}={value}"
                                      for name, value in options.items() if value is not False)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def pss_kb(pid: int) -> int:
    """A process's proportional set size (kB); 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_s(pid: int) -> float:
    """The process's CPU to the nanosecond, every thread's (/proc/<pid>/task/*/schedstat):
    /proc's ticks of 10 ms are too coarse for a few microseconds a step."""
    return sum(int((task / "schedstat").read_text().split()[0])
               for task in Path(f"/proc/{pid}/task").iterdir()) / 1e9


def compiled(source: str, directory: str) -> str:
    """The C program bench/`source` built with the machine's cc into `directory`; its path."""
    program = str(Path(directory) / Path(source).stem)
    subprocess.run(["cc", "-O2", "-o", program, str(Path(__file__).with_name(source))], check=True)
    return program


async def echo_round_trips(count: int) -> list[float]:
    server = subprocess.Popen([sys.executable, "-c", ECHO_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())  # type: ignore[union-attr]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        times = []
        message = b"x" * 64
        for _ in range(count + 20):
            t0 = time.perf_counter()
            writer.write(message)
            await reader.readexactly(len(message))
            times.append(time.perf_counter() - t0)
        writer.close()
        return times[20:]
    finally:
        server.terminate()
        server.wait()


STEP_OF_KIND = {"node": "start_logging", "component": "tick"}


def experiment_text(daemons: int, steps: int, kind: str) -> str:
    lines = ["experiment: barrier-bench", "hosts:"]
    lines += [f"  h{i}: {{}}" for i in range(daemons)]
    lines.append("components:")
    if kind == "node":
        lines += [f"  c{i}: {{host: h{i}, command: [sleep, '3600'], stop: collect}}"
                  for i in range(daemons)]
    else:
        lines += [f"  c{i}: {{host: h{i}, program: {HERE / 'ticker.py'}}}" for i in range(daemons)]
    lines.append("schedule:\n  - launch")
    lines += [f"  - {STEP_OF_KIND[kind]}"] * steps
    return "\n".join(lines) + "\n"


async def barrier_steps(daemons: int, steps: int, kind: str, runs_root: Path) -> list[float]:
    plan = parse(experiment_text(daemons, steps, kind), HERE / "barrier.yaml")
    rundir = RunDir.create(runs_root, plan.name, plan.text, plan=plan.resolved())
    await Run(plan, rundir, load_or_create_key(), lambda event: None).execute()
    durations = [s.duration_s for s in rundir.record.steps if s.phase == STEP_OF_KIND[kind]]
    assert len(durations) == steps and all(s.status == "ok" for s in rundir.record.steps)
    return durations[min(20, steps // 10):]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemons", default="1,10,100")
    parser.add_argument("--steps", type=int, default=220)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        os.environ["NETSPEC_HOME"] = str(Path(tmp) / "home")
        echo = asyncio.run(echo_round_trips(1000))
        echo_p50, echo_p99 = percentile(echo, 0.5), percentile(echo, 0.99)
        print(f"baseline: asyncio TCP echo round trip  p50 {echo_p50 * 1e6:7.1f} us  "
              f"p99 {echo_p99 * 1e6:7.1f} us  (n={len(echo)})")
        results = {"echo_p50_us": round(echo_p50 * 1e6, 1), "echo_p99_us": round(echo_p99 * 1e6, 1)}
        for n in map(int, args.daemons.split(",")):
            for kind in STEP_OF_KIND:
                steps = asyncio.run(barrier_steps(n, args.steps, kind, Path(tmp) / "runs"))
                p50, p99 = percentile(steps, 0.5), percentile(steps, 0.99)
                print(f"{kind:>9} barrier over {n:3d} daemons  p50 {p50 * 1e6:7.1f} us  "
                      f"p99 {p99 * 1e6:7.1f} us  (n={len(steps)})  p50 = {p50 / echo_p50:6.1f} x echo, "
                      f"mean {statistics.fmean(steps) * 1e6:.1f} us")
                results[f"{kind}_{n}_p50_us"] = round(p50 * 1e6, 1)
                results[f"{kind}_{n}_p99_us"] = round(p99 * 1e6, 1)
                results[f"{kind}_{n}_p50_over_echo"] = round(p50 / echo_p50, 2)
        for kind in STEP_OF_KIND:
            got = results.get(f"{kind}_100_p50_us")
            if got is not None:
                print(f"target: 100 daemons p50 <= 3000 us ({kind} barrier): "
                      f"{'met' if got <= 3000 else 'NOT met'}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
