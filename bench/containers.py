"""N containers on this machine's Docker engine beside N local daemons, in one run: the time
to bring the fleet up, each container's memory, and a node step's time for the containers
against the local daemons, in the same steps.

Each N runs one experiment through the real phase engine (its file written in a line, one
host group of each kind): `box: {count: N, docker: {image: netspec's}}` (a container per host
made for the run on its own network, netspecd its main process) and `loc: {count: N}`
(local daemons, forked); a plain `sleep` per host (a group component each, stopped at
collect); launch, then `--steps` node steps (start_logging: every daemon acks itself, no
component takes part), collect.

Figures per N:
  up              from the run's start to launch's start: both groups reached (containers
                  created and started, netspecd up in each, connected, set up); the
                  containers take nearly all of it
  end             from the last step's end (collect: the files fetched) to the run's end:
                  every host stopped, every container and the run's network removed
  step p50/p99    per node step, the slowest container's time from the step's sending to
                  its ack, as run.json records it (first tenth of the steps dropped), against
                  the same of the local daemons in the same steps
  PSS             read as collect begins: each container's processes (its cgroup's:
                  docker-init, netspecd, the sleep), mean per container; the engine's shim
                  beside each (containerd-shim, outside the container) apart; each local
                  daemon with its sleep, mean per host
The image is netspec's of this build (`ns_control image build`, cached by its content). The
run removes its containers and network; anything left of them (named for this bench's
prefix) is removed at the end, and said.

Prints figures for people, then one JSON object per N; the last line is the last N's.

    python bench/containers.py [--counts 10,50,200] [--steps 30] [--deadline 900]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from barrier import percentile, pss_kb
from netspec.controller.engine.run import Run
from netspec.controller.experiment.load import parse
from netspec.controller.experiment.model import Plan
from netspec.controller.hosts.engines import engine_client
from netspec.controller.hosts.images import build
from netspec.controller.record.progress import Progress
from netspec.controller.record.rundir import RunDir
from netspec.protocol.auth import load_or_create_key
from netspec.protocol.errors import NetspecError
from netspec.protocol.runoutcome import RunOutcome
from netspec.protocol.runrecord import HostRecord, RunRecord

HERE = Path(__file__).resolve().parent
CGROUPS = Path("/sys/fs/cgroup")


def experiment_text(n: int, steps: int, image: str, prefix: str, deadline_s: float) -> str:
    return "\n".join([
        "experiment: containers-bench", f"connect_deadline: {deadline_s:.0f}s", "hosts:",
        f"  box: {{count: {n}, docker: {{image: '{image}', prefix: {prefix}}}}}",
        f"  loc: {{count: {n}}}", "components:",
        "  idle_box: {group: box, command: [sleep, '3600'], stop: collect}",
        "  idle_loc: {group: loc, command: [sleep, '3600'], stop: collect}",
        "schedule:", f"  - {{phase: launch, deadline: {deadline_s:.0f}s}}",
        *["  - start_logging"] * steps, f"  - {{phase: collect, deadline: {deadline_s:.0f}s}}"]) + "\n"


def descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in task.read_text().split()]
            except OSError:
                continue
    return found


def container_pids(info: HostRecord) -> list[int]:
    """The host PIDs of the container's processes (its cgroup's)."""
    placement = info.placement
    assert placement is not None and placement.cgroup, "a container host without its cgroup"
    where = (CGROUPS / "memory" if placement.cgroup_version == 1 else CGROUPS) / placement.cgroup.lstrip("/")
    return [int(p) for p in (where / "cgroup.procs").read_text().split()]


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


class Watch:
    """The fleet's up time and its memory, read at the engine's progress events."""

    def __init__(self, rundir: RunDir, started: float, client: Any):
        self.rundir, self.started, self.client = rundir, started, client
        self.figures: dict[str, float] = {}
        self.notices: list[str] = []  # what the run said of its settings and of its ending

    def __call__(self, event: Progress) -> None:
        if event.kind == "notice":
            self.notices.append(event.text)
        elif event.kind == "step" and event.step == "launch":
            self.figures["up_s"] = time.perf_counter() - self.started
        elif event.kind == "step" and event.step == "collect":
            hosts = self.rundir.record.hosts
            boxes = {h: container_pids(i) for h, i in hosts.items() if i.placement is not None}
            locals_ = {h: descendants(i.daemon_pid) for h, i in hosts.items()
                       if i.placement is None and i.daemon_pid is not None}
            # The engine's shim is the parent of the container's first process (as the engine
            # says it: the lowest PID of its cgroup need not be, once PIDs wrap).
            inits = [self.client.containers.get(i.placement.container_id).attrs["State"]["Pid"]
                     for i in hosts.values() if i.placement is not None]
            shims = {parent(pid) for pid in inits}
            self.figures["shims_named_shim"] = sum("shim" in comm(p) for p in shims) / len(boxes)
            in_boxes = sum(pss_kb(p) for ps in boxes.values() for p in ps)
            self.figures["pss_mb_per_host"] = in_boxes / len(boxes) / 1024
            self.figures["shim_pss_mb_per_host"] = sum(map(pss_kb, shims)) / len(boxes) / 1024
            self.figures["local_pss_mb_per_host"] = (sum(pss_kb(p) for ps in locals_.values() for p in ps)
                                                     / len(locals_) / 1024)
            self.figures["processes_per_container"] = sum(map(len, boxes.values())) / len(boxes)
            if self.figures["shims_named_shim"] < 1:
                print(f"  warning: {1 - self.figures['shims_named_shim']:.0%} of the containers' parents "
                      "are no containerd-shim: their PSS is not the shims' alone", flush=True)


def group_steps(record_steps: list, members: set[str], skip: int) -> list[float]:
    """Per node step, the slowest of `members`' times from its sending to its ack."""
    times = []
    for step in record_steps:
        if step.phase != "start_logging":
            continue
        took = [(i.done_ns - i.sent_ns) / 1e9 for h, i in step.hosts.items()
                if h in members and i.done_ns is not None and i.sent_ns is not None]
        if len(took) == len(members):
            times.append(max(took))
    return times[skip:]


async def execute(text: str, name: str, runs: Path, watch_of: Callable[[RunDir], Any],
                  deadline_s: float) -> tuple[Plan, RunRecord, Any, list[str]]:
    """One run of the experiment `text` through the real phase engine, its progress to the
    watch `watch_of` makes of its run directory: the plan, the record, the watch and what
    the run said of its failure (with the figures: a step that failed on some hosts leaves
    the others' times)."""
    plan = parse(text, HERE / name)
    rundir = RunDir.create(runs, plan.name, plan.text, plan=plan.resolved())
    watch = watch_of(rundir)
    run = Run(plan, rundir, load_or_create_key(), watch)
    failed: list[str] = []
    try:
        await asyncio.wait_for(run.execute(), deadline_s * 3)
    except (NetspecError, TimeoutError) as exc:
        failed = [str(exc), *(str(c) for c in getattr(exc, "causes", lambda: [])())]
    return plan, rundir.record, watch, failed


async def one_size(n: int, steps: int, image: str, prefix: str, deadline_s: float, runs: Path,
                   client: Any) -> dict:
    started = time.perf_counter()
    plan, record, watch, failed = await execute(
        experiment_text(n, steps, image, prefix, deadline_s), "containers.yaml", runs,
        lambda rundir: Watch(rundir, started, client), deadline_s)
    assert "up_s" in watch.figures and "pss_mb_per_host" in watch.figures, failed
    skip = max(1, steps // 10)
    boxes = group_steps(record.steps, set(plan.groups["box"]), skip)
    local = group_steps(record.steps, set(plan.groups["loc"]), skip)
    node = next(i.placement.node for i in record.hosts.values() if i.placement is not None)
    last = record.steps[-1].left_ns if record.steps else None
    end_s = (record.ended_ns - last) / 1e9 if record.ended_ns and last else None
    return {"containers": n, "up_s": round(watch.figures["up_s"], 2),
            "end_s": None if end_s is None else round(end_s, 2),
            "step_p50_ms": round(percentile(boxes, 0.5) * 1e3, 2),
            "step_p99_ms": round(percentile(boxes, 0.99) * 1e3, 2),
            "local_step_p50_ms": round(percentile(local, 0.5) * 1e3, 2),
            "local_step_p99_ms": round(percentile(local, 0.99) * 1e3, 2),
            "pss_mb_per_host": round(watch.figures["pss_mb_per_host"], 1),
            "shim_pss_mb_per_host": round(watch.figures["shim_pss_mb_per_host"], 1),
            "local_pss_mb_per_host": round(watch.figures["local_pss_mb_per_host"], 1),
            "processes_per_container": round(watch.figures["processes_per_container"], 1),
            "steps": len(boxes), "node": node, "status": RunOutcome.of(record).status,
            "not_stopped": sum("not stopped" in text for text in watch.notices),
            "said": [text for text in watch.notices if "not stopped" in text][:3],
            "failed": [line for text in failed for line in text.splitlines()][:8]}


def said(got: dict) -> list[str]:
    """One size's figures for people."""
    n, ratio = got["containers"], got["step_p50_ms"] / got["local_step_p50_ms"]
    return [f"{n} containers beside {n} local daemons (node {got['node']}, one run)",
            f"  up (both groups reached; containers made and started)   {got['up_s']:8.2f} s",
            "  end (every host stopped, containers and network removed) "
            + (f"{got['end_s']:7.2f} s" if got["end_s"] is not None else "(the run did not end its steps)"),
            f"  node step, containers   p50 {got['step_p50_ms']:8.2f} ms  p99 {got['step_p99_ms']:8.2f} ms  "
            f"(n={got['steps']})",
            f"  node step, local        p50 {got['local_step_p50_ms']:8.2f} ms  "
            f"p99 {got['local_step_p99_ms']:8.2f} ms  (x{ratio:.2f} containers / local)",
            f"  PSS per container {got['pss_mb_per_host']:.1f} MB ({got['processes_per_container']:.0f} "
            f"processes) + its shim {got['shim_pss_mb_per_host']:.1f} MB; per local daemon "
            f"{got['local_pss_mb_per_host']:.1f} MB",
            f"  run {got['status']}; hosts the run said it did not stop in time: {got['not_stopped']}"
            + (f" (e.g. {got['said'][0]})" if got["said"] else "")
            + f"; containers and networks it left, removed here: {got['left_by_run']}",
            *(f"  the run failed: {line}" for line in got["failed"])]


def leftovers(client: Any, prefix: str) -> list[str]:
    """Remove whatever of this bench's containers and networks is left; their names."""
    gone = []
    for container in client.containers.list(all=True, filters={"name": prefix}):
        container.remove(force=True)
        gone.append(container.name)
    for network in client.networks.list(filters={"name": prefix}):
        network.remove()
        gone.append(network.name)
    return gone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="10,50,200")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--deadline", type=float, default=900.0,
                        help="seconds the fleet may take to come up or be gathered; a size's whole run "
                             "is bounded by three times this")
    args = parser.parse_args()
    prefix = f"nsbench{os.getpid()}"
    client = engine_client(None)
    try:
        t0 = time.perf_counter()
        image = build(client, lambda said: print(f"  image: {said}", flush=True))
        print(f"netspec's image {image} ready in {time.perf_counter() - t0:.1f} s (cached by its content)")
        with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
            os.environ["NETSPEC_HOME"] = str(Path(tmp) / "home")
            for n in map(int, args.counts.split(",")):
                try:
                    got = asyncio.run(one_size(n, args.steps, image, prefix, args.deadline,
                                               Path(tmp) / "runs", client))
                finally:
                    left = leftovers(client, prefix)
                    if left:
                        print(f"  removed what the run left: {len(left)} containers and networks: "
                              f"{', '.join(left[:3])}{' ...' if len(left) > 3 else ''}")
                got["left_by_run"] = len(left)
                print("\n".join(said(got)))
                print(json.dumps(got), flush=True)
    finally:
        client.close()


if __name__ == "__main__":
    sys.exit(main())
