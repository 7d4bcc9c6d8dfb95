"""N Kubernetes pods beside N Docker containers and N local daemons, in one run, on a real
single-node cluster this bench brings up for itself (tests/k8stestbed.py, netspec's image
imported into it) and takes down after: the time to bring the pods up, each pod's memory, and
a node step's time for the pods against the containers and the local daemons, in the same
steps.

Each N runs one experiment through the real phase engine: `pod: {count: N, kubernetes: {}}`
(a pod per host, made for the run in its own namespace), `box: {count: N, docker: {}}` and
`loc: {count: N}`; a plain `sleep` per host (a group component each, stopped at collect);
launch, then `--steps` node steps (start_logging: every daemon acks itself), collect.

Figures per N:
  up              from the run's start to launch's start: every group reached (the pods
                  scheduled, their sandbox and three containers started, netspecd up in each,
                  connected, set up); the slowest kind takes all of it
  step p50/p99    per node step, the slowest pod's time from the step's sending to its ack,
                  as run.json records it (first tenth of the steps dropped), against the same
                  of the containers and of the local daemons in the same steps
  MB per pod      PSS, read as collect begins, of the processes in the pod's containers'
                  cgroups (netspecd, its keeper, the sleep; the key copier has ended), mean
                  per pod; the sandbox's pause and the runtime's shims apart

Prints figures for people, then one JSON object per N; the last line is the last N's:
{"pods", "up_s", "step_p50_ms", "local_step_p50_ms", "docker_step_p50_ms", "mb_per_pod", ...}

    python bench/pods.py [--counts 10,50,100] [--steps 30] [--deadline 600]     (as root)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from barrier import percentile, pss_kb
from containers import execute, group_steps, leftovers
from netspec.controller.hosts.engines import engine_client
from netspec.controller.hosts.images import build
from netspec.controller.record.progress import Progress
from netspec.controller.record.rundir import RunDir
from netspec.protocol.runoutcome import RunOutcome

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
import k8stestbed  # noqa: E402 (the testbed lives with the tests, which start it too)


def experiment_text(n: int, steps: int, prefix: str, deadline_s: float) -> str:
    return "\n".join([
        "experiment: pods-bench", f"connect_deadline: {deadline_s:.0f}s", "hosts:",
        f"  pod: {{count: {n}, kubernetes: {{prefix: {prefix}}}}}",
        f"  box: {{count: {n}, docker: {{prefix: {prefix}}}}}",
        f"  loc: {{count: {n}}}", "components:",
        *[f"  idle_{g}: {{group: {g}, command: [sleep, '3600'], stop: collect}}"
          for g in ("pod", "box", "loc")],
        "schedule:", f"  - {{phase: launch, deadline: {deadline_s:.0f}s}}",
        *["  - start_logging"] * steps, f"  - {{phase: collect, deadline: {deadline_s:.0f}s}}"]) + "\n"


def cgroup_pids(container_ids: set[str]) -> list[int]:
    """The PIDs whose memory cgroup is one of these containers' (containerd names each
    container's cgroup by its id)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                lines = (proc / "cgroup").read_text().splitlines()
            except OSError:
                continue
            memory = next((line.rsplit(":", 1)[1] for line in lines if ":memory:" in line), "")
            if memory.rsplit("/", 1)[-1] in container_ids:
                found.append(int(proc.name))
    return found


class Watch:
    """The fleet's up time and its pods' memory, read at the engine's progress events."""

    def __init__(self, rundir: RunDir, started: float, core: Any):
        self.rundir, self.started, self.core = rundir, started, core
        self.figures: dict[str, float] = {}

    def __call__(self, event: Progress) -> None:
        if event.kind == "step" and event.step == "launch":
            self.figures["up_s"] = time.perf_counter() - self.started
        elif event.kind == "step" and event.step == "collect":
            pods = [i.placement for i in self.rundir.record.hosts.values()
                    if i.placement is not None and i.placement.kind == "kubernetes"]
            ids: set[str] = set()
            for placed in pods:
                pod = self.core.read_namespaced_pod(placed.container, placed.network)
                statuses = [*(pod.status.container_statuses or []),
                            *(pod.status.init_container_statuses or [])]
                ids |= {s.container_id.removeprefix("containerd://") for s in statuses if s.container_id}
            # Each sandbox's pause is left out: the pod's status does not give the sandbox's id.
            pids = cgroup_pids(ids)
            self.figures["mb_per_pod"] = sum(map(pss_kb, pids)) / len(pods) / 1024
            self.figures["processes_per_pod"] = len(pids) / len(pods)


async def one_size(n: int, steps: int, prefix: str, deadline_s: float, runs: Path, core: Any) -> dict:
    started = time.perf_counter()
    plan, record, watch, failed = await execute(
        experiment_text(n, steps, prefix, deadline_s), "pods.yaml", runs,
        lambda rundir: Watch(rundir, started, core), deadline_s)
    assert "up_s" in watch.figures and "mb_per_pod" in watch.figures, failed
    skip = max(1, steps // 10)
    times = {g: group_steps(record.steps, set(plan.groups[g]), skip) for g in ("pod", "box", "loc")}
    return {"pods": n, "up_s": round(watch.figures["up_s"], 2),
            "step_p50_ms": round(percentile(times["pod"], 0.5) * 1e3, 2),
            "step_p99_ms": round(percentile(times["pod"], 0.99) * 1e3, 2),
            "local_step_p50_ms": round(percentile(times["loc"], 0.5) * 1e3, 2),
            "docker_step_p50_ms": round(percentile(times["box"], 0.5) * 1e3, 2),
            "mb_per_pod": round(watch.figures["mb_per_pod"], 1),
            "processes_per_pod": round(watch.figures["processes_per_pod"], 1),
            "steps": len(times["pod"]), "status": RunOutcome.of(record).status,
            "failed": [line for text in failed for line in text.splitlines()][:8]}


def said(got: dict) -> list[str]:
    n = got["pods"]
    return [f"{n} pods beside {n} Docker containers and {n} local daemons (one run, one node)",
            f"  up (every group reached)   {got['up_s']:8.2f} s",
            f"  node step, pods        p50 {got['step_p50_ms']:8.2f} ms  p99 {got['step_p99_ms']:8.2f} ms  "
            f"(n={got['steps']})",
            f"  node step, containers  p50 {got['docker_step_p50_ms']:8.2f} ms  "
            f"(x{got['step_p50_ms'] / got['docker_step_p50_ms']:.2f} pods / containers)",
            f"  node step, local       p50 {got['local_step_p50_ms']:8.2f} ms  "
            f"(x{got['step_p50_ms'] / got['local_step_p50_ms']:.2f} pods / local)",
            f"  PSS per pod {got['mb_per_pod']:.1f} MB ({got['processes_per_pod']:.0f} processes, its "
            f"sandbox's pause and the runtime's shims apart)",
            f"  run {got['status']}", *(f"  the run failed: {line}" for line in got["failed"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="10,50,100")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--deadline", type=float, default=600.0,
                        help="seconds the fleet may take to come up or be gathered; a size's whole run "
                             "is bounded by three times this")
    args = parser.parse_args()
    from kubernetes import client as k8s
    from kubernetes import config

    testbed = k8stestbed.Testbed("b" + secrets.token_hex(3))
    prefix = f"nsbench{os.getpid()}"
    docker = engine_client(None)
    try:
        image = build(docker, lambda text: print(f"  image: {text}", flush=True))
        t0 = time.perf_counter()
        k8stestbed.up(testbed)
        k8stestbed.import_image(testbed, image)
        print(f"the testbed up, {image} in its runtime, in {time.perf_counter() - t0:.1f} s", flush=True)
        os.environ["KUBECONFIG"] = str(testbed.kubeconfig)
        api = config.new_client_from_config(str(testbed.kubeconfig))
        with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
            os.environ["NETSPEC_HOME"] = str(Path(tmp) / "home")
            for n in map(int, args.counts.split(",")):
                try:
                    got = asyncio.run(one_size(n, args.steps, prefix, args.deadline, Path(tmp) / "runs",
                                               k8s.CoreV1Api(api)))
                finally:
                    left = leftovers(docker, prefix)
                    if left:
                        print(f"  removed what the run left in Docker: {len(left)} containers and networks")
                print("\n".join(said(got)))
                print(json.dumps(got), flush=True)
        api.close()
    finally:
        docker.close()
        left = k8stestbed.down(testbed)
        if left:
            print(f"  the testbed left: {'; '.join(left)}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
