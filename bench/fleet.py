"""The SSH fleet on N namespaced hosts (8 by default): bringing daemons up, and a barrier step through SSH
tunnels against the same step over direct TCP, in the same run.

  up, fresh:      `ns_control up` on every host, each logged into as a new user with an
                  empty home of its own (tests/nethosts.py --own-homes), so every host
                  installs netspec into its own venv, all at once. The local wheels are
                  built beforehand (cached); their build is timed separately.
  up, installed:  the same with netspec already there (connect, check, start a daemon).
  step:           an application phase acked by one NETSPEC-aware component per host,
                  `--steps` times after 20 warm-up steps, as the engine records it: once
                  with the hosts reached over SSH (paramiko tunnels), once with the same
                  installed netspecd, run as the same user in the same namespace but
                  listening on the host's address, reached over plain TCP (the baseline);
                  and once more through a fan-out tree of those daemons (`--fan-out`).
Needs root (network namespaces, sshd). Prints figures for people, then one JSON object.

    python bench/fleet.py [--hosts 8] [--steps 200] [--fan-out 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import nethosts  # noqa: E402
from barrier import percentile  # noqa: E402
from netspec.controller.engine.run import Run  # noqa: E402
from netspec.controller.experiment.load import parse  # noqa: E402
from netspec.controller.experiment.model import Host  # noqa: E402
from netspec.controller.hosts import remote, wheels  # noqa: E402
from netspec.controller.record.rundir import RunDir  # noqa: E402
from netspec.protocol.auth import load_or_create_key  # noqa: E402


def up_seconds(hosts: list[nethosts.NetHost]) -> tuple[float, float]:
    """`up` on every host: its wall time, and the CPU this controller spent on it (the part a
    fleet of real hosts, each with cores of its own, cannot spread)."""
    specs = [Host(f"h{h.index}", ssh=h.alias) for h in hosts]
    t0, cpu0 = time.perf_counter(), time.process_time()
    outcome = remote.for_each_host(specs, "up")
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    failed = {h: r for h, r in outcome.items() if isinstance(r, BaseException)}
    assert not failed, failed
    remote.for_each_host(specs, "down")
    return seconds, cpu


def step_text(hosts: list[str], steps: int, fan_out: int | None = None) -> str:
    lines = ["experiment: fleet-bench", *([f"fan_out: {fan_out}"] if fan_out else []), "hosts:", *hosts,
             "components:"]
    lines += [f"  c{i}: {{host: h{i}, program: {HERE / 'ticker.py'}}}" for i in range(1, len(hosts) + 1)]
    lines += ["schedule:", "  - launch", *["  - tick"] * steps]
    return "\n".join(lines) + "\n"


async def step_times(text: str, runs_root: Path) -> list[float]:
    plan = parse(text, HERE / "fleet.yaml")
    rundir = RunDir.create(runs_root, plan.name, plan.text, plan=plan.resolved())
    await Run(plan, rundir, load_or_create_key(), lambda event: None).execute()
    steps = [s for s in rundir.record.steps if s.phase == "tick"]
    assert all(s.status == "ok" for s in rundir.record.steps), rundir.record.error
    return [s.duration_s for s in steps][20:]


def place_keys(hosts: list[nethosts.NetHost]) -> None:
    """The controller's key placed as netspecd's in each host's home, owned by its user, as
    the user of daemons kept there (`up`) places it."""
    for h in hosts:
        placed = h.home / ".config" / "netspec" / "key"
        placed.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        placed.write_text(load_or_create_key().hex() + "\n")
        placed.chmod(0o600)
        for path in (placed.parent.parent, placed.parent, placed):
            shutil.chown(path, h.user, h.user)


def direct_daemons(hosts: list[nethosts.NetHost]) -> tuple[list[str], list[subprocess.Popen]]:
    """In each namespace, the same netspecd the SSH runs used (the host user's venv and the
    key placed there, run as that user), listening on the host's address instead of
    127.0.0.1: reached over plain TCP as `address:` hosts."""
    specs, procs = [], []
    for h in hosts:
        base = f"{h.home}/.local/share/netspec"
        proc = subprocess.Popen(["ip", "netns", "exec", h.netns, "runuser", "-u", h.user, "--",
                                 f"{base}/venv/bin/netspecd", "--listen", f"{h.address}:0", "--announce",
                                 "--key", f"{h.home}/.config/netspec/key", "--root", f"{base}/work/direct"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        port = json.loads(proc.stdout.readline())["port"]  # type: ignore[union-attr]
        specs.append(f"  h{h.index}: {{address: '{h.address}:{port}'}}")
        procs.append(proc)
    return specs, procs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--fan-out", type=int, default=8,
                        help="the width of the tree the direct daemons are also reached through")
    args = parser.parse_args()
    reason = nethosts.why_unavailable()
    if reason:
        sys.exit(f"fleet.py: {reason}")
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        os.environ["NETSPEC_HOME"] = str(Path(tmp) / "home")
        os.environ.setdefault("NETSPEC_CACHE", str(Path(tmp) / "cache"))
        hosts = nethosts.up(args.hosts, state=Path(tmp) / "hosts", own_homes=True, owner=os.getpid())
        os.environ["NETSPEC_SSH_CONFIG"] = str(Path(tmp) / "hosts" / "ssh_config")
        try:
            t0 = time.perf_counter()
            wheels.local_wheels(wheels.build_id())
            wheels_s = time.perf_counter() - t0
            place_keys(hosts)
            fresh_s, fresh_cpu = up_seconds(hosts)
            installed_s, installed_cpu = up_seconds(hosts)
            ssh = asyncio.run(step_times(step_text([f"  h{h.index}: {{ssh: {h.alias}}}" for h in hosts],
                                                   args.steps + 20), Path(tmp) / "runs"))
            specs, procs = direct_daemons(hosts)
            try:
                direct = asyncio.run(step_times(step_text(specs, args.steps + 20), Path(tmp) / "runs"))
                tree = asyncio.run(step_times(step_text(specs, args.steps + 20, args.fan_out),
                                              Path(tmp) / "runs"))
            finally:
                for proc in procs:
                    proc.terminate()
                    proc.wait()
        finally:
            nethosts.down(hosts[0].set.prefix, hosts[0].state)
    n = len(hosts)
    print(f"{n} namespaced hosts, each with its own sshd")
    print(f"  local wheels built (once per netspec build, cached)   {wheels_s:6.2f} s")
    print(f"  up, fresh install (a home per host, in parallel)      {fresh_s:6.2f} s "
          f"(controller CPU {fresh_cpu:.2f} s)")
    print(f"  up, already installed                                 {installed_s:6.2f} s "
          f"(controller CPU {installed_cpu:.2f} s)")
    result = {"hosts": n, "wheels_s": round(wheels_s, 2), "up_fresh_s": round(fresh_s, 2),
              "up_installed_s": round(installed_s, 2), "up_fresh_cpu_s": round(fresh_cpu, 2),
              "up_installed_cpu_s": round(installed_cpu, 2)}
    for name, times in (("direct TCP (baseline)", direct), ("SSH tunnels", ssh),
                        (f"direct TCP, tree {args.fan_out}", tree)):
        p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
        print(f"  barrier step over {name:<22} p50 {p50 * 1e6:8.1f} us  p99 {p99 * 1e6:8.1f} us  "
              f"(n={len(times)})")
        key = "tree" if "tree" in name else "direct" if name.startswith("direct") else "ssh"
        result.update({f"step_{key}_p50_us": round(p50 * 1e6, 1), f"step_{key}_p99_us": round(p99 * 1e6, 1)})
    ratio = result["step_ssh_p50_us"] / result["step_direct_p50_us"]
    print(f"  SSH tunnel / direct TCP, p50: {ratio:.2f}x")
    result["ssh_over_direct_p50"] = round(ratio, 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
