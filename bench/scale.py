"""N local daemons from one controller, default settings, real processes: what bring-up,
a barrier step and the fleet's memory and idle CPU cost as N grows.

Each N runs one experiment through the real phase engine: N hosts, each with one component;
launch; a 5 s idle window; sync_clocks; `--steps` node steps (start_logging: every daemon
acks itself) released by message, then a third as many released at an instant (`release:
at`); collect. With `--component-max` or fewer hosts a second run does the same with application
steps (tick) acked by one NETSPEC-aware component per host (bench/ticker.py; each is a
Python process of its own, so they stop at a size the machine's memory holds).

Figures per N:
  bring-up        connect + setup + clock start of every host (the engine's `connect`), and
                  launch, in wall time
  step p50/p99    enter sent -> last ack in, as run.json records it (first tenth dropped;
                  message steps only: an `at` step waits its lead by design)
  release skew    per step, the spread of the participants' starts on the global timeline
                  (run.json's `release`), p50/p99 over the message steps and the `at` steps,
                  and how many hosts per `at` step got it after its instant
  ctl CPU         the controller's CPU (time.process_time) inside the measured steps,
                  per step per host
  daemon CPU      the daemons' CPU (/proc utime + stime) over the measured steps, per step
                  per daemon
  PSS             the daemons' proportional set size (smaps_rollup) mid-run, mean, read as
                  collect begins (outside the measured steps: the reads take the controller's
                  CPU and hold its loop, 0.5 ms a daemon)
  idle CPU        the daemons' CPU over the idle window, per daemon, in % of one CPU; the
                  clksync reference daemon (probed by every host) apart
  run.json        its size at the end
  teardown        from the end of collect to the end of `execute`
  projection      with tree runs at two sizes or more: a step's cost at 10,000 hosts from
                  the per-step, per-host and per-relay costs measured (`projection`)
Baselines, measured in the same run: per N, the floor of a flat step on this machine, N
bare processes each sent a byte over loopback TCP and answering with one (bench/stepfloor.py:
its step p50, the sender's CPU a process and each process's CPU a step; the step p50, the
controller's and the daemons' CPU are also printed as ratios to them); the same with
netspec's wire, each byte a sealed frame (`stepfloor.py --sealed`: the floor of any step
path that keeps the wire, without event loop or engine; the step p50 is also printed as a
ratio to it); the same with compiled processes (`--native`: the floor whatever language
the daemons were in); the floor of a release at an instant on this machine, N bare processes
waking at one instant (bench/wakefloor.py: the spread of their stamps, p50/p99; `at` skew
is also printed as a ratio to its p50), also compiled; and the round trip of a bare asyncio
TCP echo between two processes (bench/barrier.py), which a one-host step cannot beat.

Prints figures for people, then one JSON object as the last line.

    python bench/scale.py [--daemons 100,300,1000] [--steps 60] [--component-max 300]
                          [--fan-out flat,16]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import stepfloor
import wakefloor
from barrier import echo_round_trips, percentile, pss_kb
from netspec.controller.engine.fanout import Tree
from netspec.controller.engine.run import Run
from netspec.controller.experiment.load import parse
from netspec.controller.record.progress import Progress
from netspec.controller.record.rundir import RunDir
from netspec.protocol.auth import load_or_create_key
from netspec.protocol.errors import NetspecError

HERE = Path(__file__).resolve().parent
IDLE_S = 5.0
TICK_S = os.sysconf("SC_CLK_TCK")
# Each figure against the bare step's (stepfloor.py): ratio, this run's key, the floor's key.
FLOOR_RATIOS = (("step_p50", "step_p50_ms", "step_p50_ms"),
                ("ctl_cpu", "ctl_cpu_us_per_step_host", "sender_cpu_us_per_step_process"),
                ("daemon_cpu", "daemon_cpu_us_per_step", "process_cpu_us_per_step"))


def experiment_text(n: int, steps: int, kind: str, fan_out: int | None) -> str:
    lines = ["experiment: scale-bench", *([f"fan_out: {fan_out}"] if fan_out else []), "hosts:",
             *(f"  h{i}: {{}}" for i in range(n)), "components:"]
    if kind == "node":
        lines += [f"  c{i}: {{host: h{i}, command: [sleep, '3600'], stop: collect}}" for i in range(n)]
        step = "start_logging"
    else:
        lines += [f"  c{i}: {{host: h{i}, program: {HERE / 'ticker.py'}}}" for i in range(n)]
        step = "tick"
    return "\n".join([*lines, "schedule:", "  - launch", "  - sync_clocks", *[f"  - {step}"] * steps,
                      *[f"  - {{phase: {step}, release: at}}"] * max(steps // 3, 3), "  - collect"]) + "\n"


def cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK_S


class Watch:
    """Samples the controller and the daemons at the engine's progress events. It blocks the
    controller's loop for the idle window on purpose: nothing else may happen then."""

    def __init__(self, rundir: RunDir, steps: int, kind: str):
        self.rundir, self.kind, self.steps = rundir, kind, steps
        self.skip = max(1, steps // 10)
        self.seen = 0
        self.marks: dict[str, float] = {}
        self.figures: dict[str, float] = {}

    def daemons(self) -> list[int]:
        return [h.daemon_pid for h in self.rundir.record.hosts.values() if h.daemon_pid is not None]

    def __call__(self, event: Progress) -> None:
        now = time.perf_counter()
        if event.kind == "step" and event.step == "launch":
            self.marks["launch"] = now
        elif event.kind == "step_done" and event.step == "launch":
            self.figures["launch_s"] = now - self.marks["launch"]
            self._idle()
        elif event.kind == "step" and event.step == "collect":
            # Mid-run still, and outside every measured step: reading N processes' page
            # tables is the reader's CPU, 0.5 ms a daemon, with the controller's loop held.
            pids = self.daemons()
            self.figures["pss_mb"] = sum(map(pss_kb, pids)) / len(pids) / 1024
        elif event.kind == "step" and event.step not in ("launch", "sync_clocks"):
            if self.seen == self.skip:
                self.marks["daemon_cpu"] = sum(map(cpu_s, self.daemons()))
                self.marks["cpu"] = time.process_time()
            if self.seen == self.steps:  # the first `at` step: its lead is idle time, not a step's work
                self._cpu_per_step()
            self.seen += 1
        elif event.kind == "step_done" and event.step == "collect":
            self.marks["collected"] = now

    def _cpu_per_step(self) -> None:
        """CPU over the measured message steps, from the (skip + 1)th's start to the last one's end."""
        measured, n = self.steps - self.skip, len(self.daemons())
        ctl_cpu = time.process_time() - self.marks["cpu"]
        self.figures["ctl_cpu_us_per_step_host"] = ctl_cpu / measured / n * 1e6
        self.figures["daemon_cpu_us_per_step"] = (
            (sum(map(cpu_s, self.daemons())) - self.marks["daemon_cpu"]) / measured / n * 1e6)

    def _idle(self) -> None:
        reference = self.rundir.record.hosts["h0"].daemon_pid if "h0" in self.rundir.record.hosts else None
        pids = [p for p in self.daemons() if p != reference]
        before, ref_before = {p: cpu_s(p) for p in pids}, cpu_s(reference)
        time.sleep(IDLE_S)
        used = sum(cpu_s(p) - before[p] for p in pids)
        self.figures["idle_cpu_pct"] = used / len(pids) / IDLE_S * 100
        self.figures["reference_cpu_pct"] = (cpu_s(reference) - ref_before) / IDLE_S * 100


async def one_run(n: int, steps: int, kind: str, fan_out: int | None, runs_root: Path) -> dict[str, float]:
    plan = parse(experiment_text(n, steps, kind, fan_out), HERE / "scale.yaml")
    rundir = RunDir.create(runs_root, plan.name, plan.text, plan=plan.resolved())
    watch = Watch(rundir, steps, kind)
    await Run(plan, rundir, load_or_create_key(), watch).execute()
    ended = time.perf_counter()
    record = rundir.record
    assert record.status == "ok", record.error
    connect = next(s for s in record.steps if s.phase == "launch").entered_ns - record.started_ns
    measured = [s for s in record.steps if s.phase not in ("launch", "collect", "sync_clocks")]
    by_message = [s for s in measured if s.release.mode == "message"][watch.skip:]
    at = [s for s in measured if s.release.mode == "at"]
    durations = [s.duration_s for s in by_message]
    skews = {mode: [s.release.skew_ns / 1e3 for s in steps if s.release.skew_ns is not None]
             for mode, steps in (("message", by_message), ("at", at))}
    return {"connect_s": connect / 1e9,
            **{f"{mode}_skew_{q}_us": percentile(values, p) for mode, values in skews.items()
               for q, p in (("p50", 0.5), ("p99", 0.99))},
            "at_missed": sum(len(s.release.missed_ns) for s in at) / max(len(at), 1),
            **watch.figures, "step_p50_ms": percentile(durations, 0.5) * 1e3,
            "step_p99_ms": percentile(durations, 0.99) * 1e3,
            "runjson_mb": (rundir.path / "run.json").stat().st_size / 1e6,
            "teardown_s": ended - watch.marks["collected"],
            **({"relays": record.fan_out.relays, "depth": record.fan_out.depth} if record.fan_out else {})}


def projection(width: int, trees: dict[int, dict[str, float]], flats: dict[int, dict[str, float]],
               hosts: int = 10_000) -> dict[str, float]:
    """A step's cost at `hosts` hosts through a tree of `width`, from tree runs at two sizes
    or more (and the flat runs of the same sizes):

    - the controller's CPU per step in each tree run, C(N) = ctl CPU per host x N, fitted
      to a line by least squares: C(N) = c_step + c_host x N. c_step is what a step costs
      whatever the fleet (the first level's frames, the barrier, the journal); c_host is
      what every further host adds (its part of the enter built and sent, its records
      journalled, the per-host set-up of a step);
    - per relay, its CPU per step beyond a leaf's, at the largest N:
      (tree - flat daemon CPU) x N / relays.
    Controller work = c_step + hosts x c_host; a step on a real fleet (a core per host) also
    waits for the relays of each level in turn: depth x c_relay."""
    sizes = sorted(trees)
    cost = {n: trees[n]["ctl_cpu_us_per_step_host"] * n for n in sizes}
    mean_n, mean_c = sum(sizes) / len(sizes), sum(cost.values()) / len(sizes)
    c_host = (sum((n - mean_n) * (cost[n] - mean_c) for n in sizes)
              / sum((n - mean_n) ** 2 for n in sizes))
    c_step = mean_c - c_host * mean_n
    big = sizes[-1]
    c_relay = (max(trees[big]["daemon_cpu_us_per_step"] - flats[big]["daemon_cpu_us_per_step"], 0.0)
               * big / trees[big]["relays"]) if big in flats else 0.0
    depth = Tree(width, tuple(range(hosts))).depth()
    controller_ms = (c_step + hosts * c_host) / 1e3
    return {"c_step_us": c_step, "c_host_us": c_host, "c_relay_us": c_relay, "depth": depth,
            "controller_ms": controller_ms, "step_ms": controller_ms + depth * c_relay / 1e3}


def floors(n: int, results: dict[str, float | str]) -> tuple[dict[str, float], dict[str, float]]:
    """The machine's floors for N processes, printed and put in `results`: the bare step, the
    wire's, the compiled one, and the wake-ups at one instant of Python and of compiled
    processes. Returns the bare and the wire's, which the runs' figures are divided by."""
    steps = {"step": ({}, "a byte each way a step (bench/stepfloor.py)"),
             "wire": ({"sealed": True}, "a sealed frame each way a step (stepfloor.py --sealed)"),
             "compiled_step": ({"native": True}, "compiled, a byte each way a step (stepfloor.py --native)")}
    got = {}
    for name, (options, what) in steps.items():
        got[name] = floor = stepfloor.floor(n, **options)
        results.update({f"{name}_floor_{n}_{k}": round(v, 3) for k, v in floor.items() if k != "processes"})
        print(f"floor: {n} bare processes, {what}: step p50 {floor['step_p50_ms']:.2f} ms; sender CPU "
              f"{floor['sender_cpu_us_per_step_process']:.1f} us/step/process; each process "
              f"{floor['process_cpu_us_per_step']:.1f} us/step", flush=True)
    for name, native in (("wake", False), ("compiled_wake", True)):
        spreads = wakefloor.spreads_us(n, native=native)
        results.update({f"{name}_floor_{n}_{q}_us": round(percentile(spreads, p), 1)
                        for q, p in (("p50", 0.5), ("p99", 0.99))})
        print(f"floor: {n} bare {'compiled ' if native else ''}processes waking at one instant "
              f"(bench/wakefloor.py{' --native' if native else ''}): spread p50 "
              f"{results[f'{name}_floor_{n}_p50_us']:.0f} us, "
              f"p99 {results[f'{name}_floor_{n}_p99_us']:.0f} us", flush=True)
    return got["step"], got["wire"]


def describe(n: int, kind: str, got: dict[str, float]) -> str:
    return " | ".join([
        f"N={n:5d} {kind:>16}: bring-up {got['connect_s']:6.1f} s + launch {got['launch_s']:5.1f} s",
        f"step p50 {got['step_p50_ms']:7.2f} ms ({got['step_p50_over_floor']:.1f}x the floor, "
        f"{got['step_p50_over_wire_floor']:.1f}x the wire's) "
        f"p99 {got['step_p99_ms']:7.2f} ms",
        f"ctl CPU {got['ctl_cpu_us_per_step_host']:6.1f} us/step/host ({got['ctl_cpu_over_floor']:.1f}x)",
        f"daemon CPU {got['daemon_cpu_us_per_step']:6.1f} us/step ({got['daemon_cpu_over_floor']:.1f}x)",
        f"PSS {got['pss_mb']:5.1f} MB",
        f"idle {got['idle_cpu_pct']:.3f} %CPU/daemon, reference {got['reference_cpu_pct']:.1f} %",
        f"release skew p50/p99: message {got['message_skew_p50_us']:.0f}/"
        f"{got['message_skew_p99_us']:.0f} us, "
        f"at {got['at_skew_p50_us']:.0f}/{got['at_skew_p99_us']:.0f} us "
        f"(p50 {got['at_skew_p50_over_floor']:.2f}x the floor; "
        f"{got['at_missed']:.1f} hosts/step got it after its instant)",
        f"run.json {got['runjson_mb']:.1f} MB", f"teardown {got['teardown_s']:.1f} s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemons", default="100,300,1000")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--component-max", type=int, default=300)
    parser.add_argument("--fan-out", default="flat,16",
                        help="how steps reach the hosts, each in a run of its own: flat, or a tree's width")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    results: dict[str, float | str] = {}
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        os.environ["NETSPEC_HOME"] = str(Path(tmp) / "home")
        echo = asyncio.run(echo_round_trips(1000))
        results["echo_p50_us"] = round(percentile(echo, 0.5) * 1e6, 1)
        print(f"baseline: asyncio TCP echo round trip p50 {results['echo_p50_us']} us; "
              f"fd limit {soft}/{hard}")
        runs: dict[tuple[str, int | None], dict[int, dict[str, float]]] = {}
        for n in map(int, args.daemons.split(",")):
            bare, wire = floors(n, results)
            for kind, fan_out in itertools.product(("node", "component"), args.fan_out.split(",")):
                if kind == "component" and n > args.component_max:
                    continue
                width = None if fan_out == "flat" else int(fan_out)
                label = f"{kind} {'flat' if width is None else f'tree {width}'}"
                try:
                    got = asyncio.run(one_run(n, args.steps, kind, width, Path(tmp) / "runs"))
                except NetspecError as exc:
                    first = str(exc).splitlines()[0][:300]
                    print(f"N={n:5d} {label:>16}: FAILED: {first}", flush=True)
                    results[f"{label.replace(' ', '_')}_{n}_failed"] = first
                    continue
                got["at_skew_p50_over_floor"] = got["at_skew_p50_us"] / results[f"wake_floor_{n}_p50_us"]
                for ratio, mine, theirs in FLOOR_RATIOS:
                    got[f"{ratio}_over_floor"] = got[mine] / bare[theirs]
                got["step_p50_over_wire_floor"] = got["step_p50_ms"] / wire["step_p50_ms"]
                print(describe(n, label, got), flush=True)
                results.update({f"{label.replace(' ', '_')}_{n}_{k}": round(v, 3) for k, v in got.items()})
                runs.setdefault((kind, width), {})[n] = got
        for width in (w for (kind, w) in runs if kind == "node" and w is not None):
            trees = runs[("node", width)]
            if len(trees) < 2:
                print(f"  no projection for tree {width}: it needs tree runs at two sizes or more")
                continue
            said = projection(width, trees, runs.get(("node", None), {}))
            print(f"  projected from N={','.join(map(str, sorted(trees)))}, tree {width}, to 10,000 hosts: "
                  f"controller {said['controller_ms']:.1f} ms a step ({said['c_step_us']:.0f} us a step "
                  f"+ {said['c_host_us']:.2f} us a host), a step on a fleet of its own cores "
                  f"{said['step_ms']:.1f} ms ({said['depth']} levels, {said['c_relay_us']:.0f} us a relay)",
                  flush=True)
            results.update({f"projection_tree_{width}_{k}": round(v, 3) for k, v in said.items()})
    print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())
