"""One daemon's own CPU for a node step, on a machine otherwise quiet: what bench/scale.py's
"daemon CPU per step" would be without a fleet sharing the cores.

A real netspecd (its own process, every thread's CPU from `/proc`) set up for a run with no
components; the controller's DaemonClient sends it `--steps` node steps one after the
other (after 50 to warm up), flat (an ack per step) and as a leaf of a fan-out tree asked
for a summary (it folds its own ack), each waiting for the ack before the next.
Baseline, measured in the same run: the round trip of a bare asyncio TCP echo between two
processes (bench/barrier.py).

Prints figures for people, then one JSON object as the last line.

    python bench/nodestep.py [--steps 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from barrier import cpu_s, echo_round_trips, percentile
from netspec.controller.hosts.fleet import DaemonClient
from netspec.protocol import messages as m
from netspec.protocol.auth import load_or_create_key
from netspec.protocol.kinds import Ack, Acks

WARM_UP = 50


async def one_kind(summarized: bool, steps: int, root: Path) -> dict[str, float]:
    daemon = subprocess.Popen([sys.executable, "-m", "netspec.daemon.main", "--listen", "127.0.0.1:0",
                               "--announce", "--root", str(root)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        assert daemon.stdout is not None
        port = json.loads(daemon.stdout.readline())["port"]
        acks: asyncio.Queue[object] = asyncio.Queue()
        client = await DaemonClient.connect("a", ("127.0.0.1", port), load_or_create_key(),
                                            lambda host, event: acks.put_nowait(event))
        serving = asyncio.create_task(client.serve())
        await client.request(m.SETUP, asyncio.get_running_loop().time() + 10, run="nodestep", host="a",
                             components=[])
        node = [{"name": m.NODE, "params": {}}]

        async def step(index: int) -> None:
            if summarized:
                client.notify(m.ENTER, phase="rest", step=index, hosts={"a": 0}, lists=[node], published={},
                              summarize=True)
            else:
                client.notify(m.ENTER, phase="rest", step=index, components=node, published={})
            while type(await asyncio.wait_for(acks.get(), 10)) not in (Ack, Acks):
                pass
        for index in range(WARM_UP):
            await step(index)
        cpu, started = cpu_s(daemon.pid), time.perf_counter()
        for index in range(WARM_UP, WARM_UP + steps):
            await step(index)
        figures = {"daemon_cpu_us_per_step": (cpu_s(daemon.pid) - cpu) / steps * 1e6,
                   "round_trip_us": (time.perf_counter() - started) / steps * 1e6}
        await client.close()
        await serving
        return figures
    finally:
        daemon.terminate()
        daemon.wait(timeout=20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        os.environ["NETSPEC_HOME"] = str(Path(tmp) / "home")
        echo = asyncio.run(echo_round_trips(1000))
        results = {"echo_p50_us": round(percentile(echo, 0.5) * 1e6, 1)}
        print(f"baseline: asyncio TCP echo round trip p50 {results['echo_p50_us']} us")
        for kind, summarized in (("flat", False), ("summarized", True)):
            got = asyncio.run(one_kind(summarized, args.steps, Path(tmp) / kind))
            results.update({f"{kind}_{k}": round(v, 1) for k, v in got.items()})
            print(f"node step, {kind:>10}: daemon CPU {got['daemon_cpu_us_per_step']:6.1f} us a step, "
                  f"round trip {got['round_trip_us']:6.1f} us "
                  f"(x{got['round_trip_us'] / results['echo_p50_us']:.2f} the echo)")
    print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())
