"""The controller's own CPU for one step through a fan-out tree, at fleet sizes this machine
cannot run as daemons (up to 10,000 hosts): what the projection of bench/scale.py estimates,
measured directly. With `--width flat`, the same for a flat step: a connection a host, each
enter answered by the host's ack, so that the controller's own part of scale.py's flat
figure is seen without the fleet's processes beside it.

The controller is the real one (engine/step.py's Steps.step: the step's plan, barrier, enters, the
journal, the summaries' checks and the ack journal) over real authenticated connections to
the tree's first level. The first level is one separate process (this file with
--first-level) that stands in for the relays below it: for each enter it receives it folds a
plain ack of every host the enter names (protocol/acksummary.py, as every daemon of that
subtree would; each host's stamps drawn apart, as real hosts' are) and sends the summary up,
its records compressed as a first-level relay sends them, so the controller reads what a
tree of real daemons would send it. Only the controller's process is measured (time.process_time over
`--steps` node steps after a warm-up), so the stand-in's work is not counted.
Baseline, measured in the same run: the same step at the smallest N and the same width.

Prints figures for people, then one JSON object as the last line.

    python bench/stepcost.py [--hosts 1000,3000,10000] [--width 4,8,16,flat] [--steps 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from netspec.controller.engine.run import Run
from netspec.controller.experiment.load import parse
from netspec.controller.hosts.fleet import DaemonClient
from netspec.controller.record.rundir import RunDir
from netspec.protocol import messages as m
from netspec.protocol.acksummary import AckSummary
from netspec.protocol.auth import load_or_create_key, server_handshake
from netspec.protocol.channel import Channel
from netspec.protocol.kinds import Ack, Summary
from netspec.protocol.runoutcome import RunOutcome

HERE = Path(__file__).resolve().parent


def experiment_text(n: int, width: int | None) -> str:
    return "\n".join(["experiment: stepcost", *([f"fan_out: {width}"] if width else []), "hosts:",
                      *(f"  h{i}: {{}}" for i in range(n)), "components:",
                      # Never started (the schedule has no launch): a host of the plan has one.
                      *(f"  c{i}: {{host: h{i}, command: [sleep, '3600'], stop: collect}}" for i in range(n)),
                      "schedule:", "  - start_logging"]) + "\n"


def subtree_summary(hosts: list[str], draw: random.Random) -> Summary:
    """A plain ack of every host folded, as a first-level relay sends it up (records
    compressed). Each host's stamps differ as real hosts' do, so the records compress as
    theirs would."""
    summary, now = AckSummary(), time.time_ns()
    for host in hosts:
        entered = now + draw.randrange(10_000_000)
        summary.add_host(host, [Ack(step=0, component=m.NODE, status=m.ACK_OK, entered=entered,
                                    acked=entered + draw.randrange(10_000, 1_000_000),
                                    entry_clock=(draw.randrange(-1_000_000, 1_000_000),
                                                 draw.randrange(10_000, 100_000)))])
    return summary.wire(compress=True)


def flat_acks(enter: dict[str, Any]) -> list[dict[str, Any]]:
    """A host's acks of a flat step, one a component, as netspecd sends them."""
    entered = time.time_ns()
    return [{"status": m.ACK_OK, "t": m.ACK, "step": enter["step"], "component": c["name"],
             "entered": entered, "acked": entered + 50_000, "entry_clock": [12_345, 40_000]}
            for c in enter["components"]]


async def first_level(key: bytes, width: int) -> None:
    """Serve authenticated connections; answer each enter with its subtree's summary, or
    with its host's ack (flat)."""
    async def serve(channel: Channel) -> None:
        await server_handshake(channel, key)
        summary = None
        while (message := await channel.recv()) is not None:
            if "hosts" not in message:
                for ack in flat_acks(message):
                    channel.send(ack)
                continue
            # Built once and sent for every step: the relays stand on other machines, so
            # their work must not take this machine's cores from the controller measured.
            summary = summary or subtree_summary(message["hosts"], random.Random(width))
            channel.send({"t": m.ACKS, "step": message["step"], "acks": [], "summary": summary})
    async with asyncio.TaskGroup() as tg:
        server = await Channel.serve(serve, "127.0.0.1", 0, tg)
        print(server.sockets[0].getsockname()[1], flush=True)
        async with server:
            await server.serve_forever()


async def one_size(n: int, width: int | None, steps: int, key: bytes, runs: Path) -> dict[str, float]:
    responder = subprocess.Popen([sys.executable, __file__, "--first-level", "--width", str(width or 0)],
                                 stdout=subprocess.PIPE, text=True)
    try:
        assert responder.stdout is not None
        port = int(responder.stdout.readline())
        plan = parse(experiment_text(n, width), HERE / "stepcost.yaml")
        rundir = RunDir.create(runs, plan.name, plan.text)
        run = Run(plan, rundir, key, lambda event: None)
        run.failure.open()
        step = plan.schedule[0]
        tree = run.fleet.fan_out.tree
        async with asyncio.TaskGroup() as tg, run.stragglers:
            for first in tree.first if tree is not None else [h.name for h in plan.hosts]:
                run.fleet.clients[first] = await DaemonClient.connect(first, ("127.0.0.1", port), key,
                                                                      run.inbox.on_event)
                tg.create_task(run.fleet.clients[first].serve())
            for index in range(5):  # warm-up: the step's plan is built once, then reused
                await run._step(index, step)
            started_cpu, started = time.process_time(), time.perf_counter()
            for index in range(5, 5 + steps):
                await run._step(index, step)
            cpu, wall = time.process_time() - started_cpu, time.perf_counter() - started
            for client in run.fleet.clients.values():
                await client.close()
        assert all(s.status == "ok" for s in rundir.record.steps)
        acks = rundir.path / "run.acks"  # a tree's folded acks; a flat step's are in run.json's journal
        journal = acks.stat().st_size if acks.exists() else 0
        rundir.finish(RunOutcome("ok"))
        return {"ctl_cpu_us_per_step": cpu / steps * 1e6, "ctl_cpu_us_per_step_host": cpu / steps / n * 1e6,
                "step_wall_ms": wall / steps * 1e3, "ack_journal_bytes_per_step": journal / (5 + steps)}
    finally:
        responder.kill()
        responder.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="1000,3000,10000")
    parser.add_argument("--width", default="16", help="the tree's fan-out, or flat; several: 4,8,16,flat")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--first-level", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.first_level:  # the parent's NETSPEC_HOME, hence its key
        asyncio.run(first_level(load_or_create_key(), int(args.width)))
        return
    sizes = sorted(map(int, args.hosts.split(",")))
    widths = [None if w == "flat" else int(w) for w in args.width.split(",")]
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        os.environ["NETSPEC_HOME"] = str(Path(tmp) / "home")
        key = load_or_create_key()
        results: dict[str, Any] = {"steps": args.steps}
        for width in widths:
            for n in sizes:
                got = asyncio.run(one_size(n, width, args.steps, key, Path(tmp) / "runs"))
                results.update({f"w{width or 'flat'}_n{n}_{k}": round(v, 3) for k, v in got.items()})
                how = f"tree {width:3d}" if width else "flat    "
                print(f"N={n:6d}, {how}: controller CPU {got['ctl_cpu_us_per_step'] / 1e3:7.2f} ms "
                      f"a step ({got['ctl_cpu_us_per_step_host']:.2f} us a host), step "
                      f"{got['step_wall_ms']:7.2f} ms with the hosts answering at once, ack journal "
                      f"{got['ack_journal_bytes_per_step'] / 1e3:.0f} kB a step", flush=True)
            label = width or "flat"
            base = results[f"w{label}_n{sizes[0]}_ctl_cpu_us_per_step"]
            print(f"  {'tree ' if width else ''}{label}, against N={sizes[0]} in the same run: " + ", ".join(
                f"N={n} x{results[f'w{label}_n{n}_ctl_cpu_us_per_step'] / base:.2f}" for n in sizes[1:]))
    print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())
