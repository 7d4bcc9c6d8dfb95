"""Fault suite: SIGKILL a component, a daemon or the controller at a random instant of a run.

Each trial runs a two-host experiment (host a's component `one` and host b's `two` log a
numbered FAULT/tick every millisecond through phase `work`) and kills one target at an
instant drawn uniformly over a clean run measured first in the same session (a component
or a daemon from launch to the end of work, the controller over the whole run):
  component: `one` itself;
  daemon:    host a's netspecd;
  controller: ns_control, after which `ns_control collect` gathers what the hosts hold and
             merges (a kill during the merge leaves a run that is over: collect merges it).
Checked per trial:
  clear:   the run fails (exit 1) with an error naming host a (and `one`, for a component),
           or, for the controller, the run is marked interrupted and `collect` succeeds;
  seconds: from the kill to ns_control's exit, against the step's deadline + 5 s;
  orphans: no process of the run left once it is over;
  records: `one`'s ticks in the run directory are a gap-free prefix 0..n-1, and the last
           one was logged at most one flush interval (plus scheduling slack) before the kill;
  next:    a clean run right after succeeds.
With --ssh, the same over SSH on two namespaced hosts this bench builds and removes
(root only). Prints figures for people, then one JSON object as its last line.

    python bench/faults.py [--trials 20] [--kinds component,daemon,controller] [--ssh] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from netspec.datastream.format import DEFAULT_FLUSH_MS
from netspec.datastream.reader import StreamReader
from netspec.protocol import messages as m
from netspec.protocol.errors import NetspecError
from netspec.protocol.exits import run_processes
from netspec.protocol.runrecord import HostRecord, RunRecord, read_run

NETHOSTS = Path(__file__).resolve().parent.parent / "tests" / "nethosts.py"
DEADLINE_S = 10.0
TICKING_S = 2.0
SLACK_MS = 150.0  # a flush interval is a period of the flusher thread, on a busy machine
PROGRAM = """
import time
from netspec import nodelib
TICK = nodelib.event("FAULT", "tick")
def work(ctx):
    end, n = time.monotonic() + float(ctx.params.get("seconds", 2)), 0
    while time.monotonic() < end:
        TICK.log(n)
        n += 1
        time.sleep(0.001)
nodelib.register("work", work)
nodelib.run()
"""
EXPERIMENT = """
experiment: faults
hosts: {{a: {A}, b: {B}}}
components:
  one: {{host: a, program: {PROGRAM}, params: {{seconds: {SECONDS}}}}}
  two: {{host: b, program: {PROGRAM}, params: {{seconds: {SECONDS}}}}}
streams: {{t: {{enable: [FAULT]}}}}
schedule: [launch, start_logging, {{phase: work, deadline: {DEADLINE}s}}, stop_logging, collect]
"""


class Bench:
    def __init__(self, where: Path, hosts: tuple[str, str], env: dict[str, str]):
        self.where, self.env = where, env
        program = where / "counter.py"
        program.write_text(PROGRAM)
        for name, seconds in (("trial", TICKING_S), ("clean", 0.2)):
            (where / f"{name}.yaml").write_text(EXPERIMENT.format(
                A=hosts[0], B=hosts[1], PROGRAM=program, SECONDS=seconds, DEADLINE=DEADLINE_S))

    def ns_control(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "netspec.controller.cli", *args], cwd=self.where,
                              env=self.env, capture_output=True, text=True, timeout=timeout)

    def start(self) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "netspec.controller.cli", "run", "trial.yaml"],
                                cwd=self.where, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def record(self) -> RunRecord | None:
        """The latest run's record, or None while there is none to read."""
        try:
            return read_run(self.where / "runs" / "latest")
        except NetspecError:
            return None

    def latest_id(self) -> str:
        record = self.record()
        return record.id if record is not None else ""

    def host_a(self) -> HostRecord | None:
        record = self.record()
        return record.hosts.get("a") if record is not None else None


def target_pid(kind: str, bench: Bench, proc: subprocess.Popen[str], run_id: str) -> int | None:
    if kind == "controller":
        return proc.pid
    if kind == "daemon":
        host = bench.host_a()
        return host.daemon_pid if host is not None else None
    for p in run_processes(run_id):
        try:
            env = p.environ()
        except psutil.Error:
            continue
        if env.get(m.COMPONENT_ENV) == "one" and env.get(m.HOST_ENV) == "a":
            return p.pid
    return None


def ticks(run: Path) -> list[tuple[int, int]]:
    """(tag, ts) of every FAULT/tick of component one in the run directory."""
    return sorted((r.tag, r.ts) for path in (run / "hosts" / "a" / "streams").glob("t.one.*.ds")
                  for r in StreamReader(path) if r.entity.name == "tick")


def trial(kind: str, bench: Bench, instant: float) -> dict:
    before = bench.latest_id()
    started = time.monotonic()
    proc = bench.start()
    run_id, pid = "", None
    while time.monotonic() < started + 60 and proc.poll() is None:
        if not run_id and bench.latest_id() != before:
            run_id = bench.latest_id()
        if time.monotonic() >= started + instant and run_id:
            pid = target_pid(kind, bench, proc, run_id)
            if pid is not None:
                break
        time.sleep(0.005)
    if pid is None:
        proc.communicate(timeout=120)
        return {"kind": kind, "missed": True, "rc": proc.returncode}
    killed_ns, killed = time.time_ns(), time.monotonic()
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended just now, by itself
        proc.communicate(timeout=120)
        return {"kind": kind, "missed": True, "rc": proc.returncode}
    _, err = proc.communicate(timeout=120)
    took = time.monotonic() - killed
    result = {"kind": kind, "missed": False, "at_s": round(killed - started, 3), "rc": proc.returncode,
              "seconds": round(took, 2)}
    if kind == "controller":
        collected = bench.ns_control("collect", run_id)
        # Killed during its merge, a run may be over ("ok"): collect then merges it again.
        record = bench.record()
        result["status"] = status = record.status if record is not None else None
        merged = (bench.where / "runs" / "latest" / "merged" / "summary.json").exists()
        # Killed before it reached a host, a run has nothing to collect: said, exit 0.
        nothing = "nothing to collect" in collected.stdout
        result["clear"] = (collected.returncode == 0 and status in ("interrupted", "ok")
                           and (merged or nothing))
        result["said"] = collected.stdout.strip().splitlines()[:2]
    else:
        named = "host a" in err and (kind == "daemon" or "one" in err)
        result["clear"] = proc.returncode == 1 and named
        result["said"] = [line for line in err.splitlines() if "caused by" in line][:2]
        if kind == "daemon":
            host = bench.host_a()
            result["salvaged"] = host.salvaged.removed if host is not None and host.salvaged else None
    time.sleep(0.2)
    result["orphans"] = len(run_processes(run_id))
    found = ticks(bench.where / "runs" / "latest")
    result["records"] = len(found)
    result["gap_free"] = [t for t, _ in found] == list(range(len(found)))
    record = bench.record()
    work = next((s for s in record.steps if s.phase == "work"), None) if record is not None else None
    # The lost tail says something only where `one` was still ticking at the kill.
    if found and work is not None and work.entered_ns and killed_ns < work.entered_ns + TICKING_S * 1e9:
        result["tail_ms"] = round(max(killed_ns - found[-1][1], 0) / 1e6, 1)
    result["next_ok"] = bench.ns_control("run", "clean.yaml").returncode == 0
    return result


def ssh_hosts(prefix: str) -> tuple[tuple[str, str], dict[str, str]]:
    done = subprocess.run([sys.executable, str(NETHOSTS), "up", "2", "--prefix", prefix],
                          capture_output=True, text=True, check=True)
    config = re.search(r"NETSPEC_SSH_CONFIG=(\S+)", done.stdout)
    if config is None:
        raise SystemExit(f"nethosts printed no NETSPEC_SSH_CONFIG:\n{done.stdout}{done.stderr}")
    return ("{ssh: netspec-h1, accept_new_host_key: true}", "{ssh: netspec-h2, accept_new_host_key: true}"), \
        {"NETSPEC_SSH_CONFIG": config.group(1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--kinds", default="component,daemon,controller")
    parser.add_argument("--ssh", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    prefix = f"nf{secrets.token_hex(2)}"
    with tempfile.TemporaryDirectory(prefix="netspec-faults-") as tmp:
        where = Path(tmp)
        env = {**os.environ, "NETSPEC_HOME": str(where / "home")}
        hosts = ("{}", "{}")
        try:
            if args.ssh:
                hosts, extra = ssh_hosts(prefix)
                env.update(extra)
            bench = Bench(where, hosts, env)
            first = time.monotonic()
            clean = bench.ns_control("run", "trial.yaml")
            run_s = time.monotonic() - first
            if clean.returncode:
                raise SystemExit(f"the clean run failed:\n{clean.stdout}{clean.stderr}")
            first, first_ns = time.monotonic(), time.time_ns()
            bench.ns_control("run", "trial.yaml")
            run_s = time.monotonic() - first  # installed and warm now
            record = bench.record()
            assert record is not None
            steps = {s.phase: s for s in record.steps}
            # A component or a daemon is killed while the run's steps go (launch to the end
            # of work: a later kill finds the component gone); the controller at any time.
            steps_s = (((steps["launch"].entered_ns or 0) - first_ns) / 1e9,
                       ((steps["work"].left_ns or 0) - first_ns) / 1e9)
            windows = {"component": steps_s, "daemon": steps_s, "controller": (0.3, run_s)}
            results = [trial(kind, bench, rng.uniform(*windows[kind]))
                       for kind in args.kinds.split(",") for _ in range(args.trials)]
        finally:
            if args.ssh:
                subprocess.run([sys.executable, str(NETHOSTS), "down", "--prefix", prefix],
                               capture_output=True)
    where_ = "over SSH (namespaced hosts)" if args.ssh else "local daemons"
    print(f"fault suite, {where_}: a clean run takes {run_s:.2f} s, its steps from {steps_s[0]:.2f} s to "
          f"{steps_s[1]:.2f} s; kills uniform over them (the controller's over the run); "
          f"step deadline {DEADLINE_S:g} s, flush interval {DEFAULT_FLUSH_MS} ms")
    summary = {}
    for kind in args.kinds.split(","):
        mine = [r for r in results if r["kind"] == kind]
        hit = [r for r in mine if not r["missed"]]
        tails = [r["tail_ms"] for r in hit if "tail_ms" in r]
        row = {"trials": len(mine), "killed": len(hit), "clear": sum(r["clear"] for r in hit),
               "max_s_to_error": max((r["seconds"] for r in hit), default=None),
               "within_deadline_plus_5s": sum(r["seconds"] <= DEADLINE_S + 5 for r in hit),
               "orphans": sum(r["orphans"] for r in hit), "gap_free": sum(r["gap_free"] for r in hit),
               "max_tail_ms": max(tails, default=None),
               "tail_within_flush": sum(t <= DEFAULT_FLUSH_MS + SLACK_MS for t in tails),
               "with_tail": len(tails), "next_ok": sum(r["next_ok"] for r in hit),
               "median_records": statistics.median([r["records"] for r in hit]) if hit else None}
        summary[kind] = row
        print(f"  {kind:<10} {row['killed']}/{row['trials']} killed mid-run; clear error {row['clear']}; "
              f"to the error at most {row['max_s_to_error']} s ({row['within_deadline_plus_5s']} within "
              f"deadline + 5 s); orphans {row['orphans']}; gap-free records {row['gap_free']}; "
              f"lost tail at most {row['max_tail_ms']} ms ({row['tail_within_flush']}/{row['with_tail']} "
              f"within a flush interval + {SLACK_MS:g} ms); next run ok {row['next_ok']}/{row['killed']}")
        for r in hit:
            if not (r["clear"] and r["gap_free"] and not r["orphans"] and r["next_ok"]):
                print(f"    not clean: {r}")
    print(json.dumps({"bench": "faults", "ssh": args.ssh, "clean_run_s": round(run_s, 2), **summary}))
    failed = any(row["clear"] < row["killed"] or row["orphans"] or row["next_ok"] < row["killed"]
                 or row["gap_free"] < row["killed"] for row in summary.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
