"""clksync's offline fit on a routed path, idle, under CPU load and under cross-traffic,
against chrony measuring the same path at the same time.

Three network namespaces: a (the reference, probe server and chrony server), r (a router
forwarding between two veth pairs, a tbf on its egress towards a) and b (probe client and
chrony client). All share this machine's clock, so the true offset of b is exactly 0 and
any estimate is error. Phases, `--seconds` each:
  idle      nothing else running
  cpu       `stress-ng --cpu 2` on the machine
  traffic   TCP from b to a through the router's tbf (40 mbit), so the probes queue
Then the idle phase's exchanges again through a synthetic warp of b's clock (offset, 50 ppm
drift, 0.5 ppm sinusoidal wander of period 20 s) applied to b's timestamps.

Per phase: p50/p99/max |error| of the offline fit on a 1 ms grid, how often the bound holds
the truth (coverage), the median bound. Our client probes in volleys of four exchanges
(clksync.client.VOLLEY) about every 0.2 s. chrony runs `-x` (it never touches the clock),
polling every 0.25 s over the same links; its "System time" from `chronyc tracking`,
sampled every second, is its error. Needs root, stress-ng and chrony. Prints figures for people,
then one JSON object.

    python bench/clksync.py [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

# The synthetic warp is the one the fit's tests use (tests/clockwarp.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from clockwarp import warp
from netspec.clksync.client import ProbeClient
from netspec.clksync.fit import Exchanges, fit
from netspec.clksync.server import ProbeServer

# Namespaces named for this run, so that two runs on one machine do not tear down each
# other's (the addresses live only inside them, so they cannot collide).
_RUN = f"nsck{os.getpid()}"
A, R, B = f"{_RUN}-a", f"{_RUN}-r", f"{_RUN}-b"
A_ADDR, B_ADDR = "10.201.1.1", "10.201.2.1"
PORT = 32123
INTERVAL_S = 0.2
CROSS_PORT = 32124
TBF = "rate 40mbit burst 32kbit latency 20ms"
PHASES = ("idle", "cpu", "traffic")


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(args, check=check, capture_output=True, text=True)


def ns(name: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", name, *args]


def topology_up() -> None:
    topology_down()
    for n in (A, R, B):
        sh("ip", "netns", "add", n)
        sh(*ns(n, "ip", "link", "set", "lo", "up"))
    sh("ip", "link", "add", "ck-a", "netns", A, "type", "veth", "peer", "name", "ck-ra", "netns", R)
    sh("ip", "link", "add", "ck-b", "netns", B, "type", "veth", "peer", "name", "ck-rb", "netns", R)
    for n, dev, addr in ((A, "ck-a", f"{A_ADDR}/24"), (R, "ck-ra", "10.201.1.2/24"),
                         (R, "ck-rb", "10.201.2.2/24"), (B, "ck-b", f"{B_ADDR}/24")):
        sh(*ns(n, "ip", "addr", "add", addr, "dev", dev))
        sh(*ns(n, "ip", "link", "set", dev, "up"))
    sh(*ns(A, "ip", "route", "add", "default", "via", "10.201.1.2"))
    sh(*ns(B, "ip", "route", "add", "default", "via", "10.201.2.2"))
    sh(*ns(R, "sysctl", "-qw", "net.ipv4.ip_forward=1"))
    # A tbf both ways: a qdisc on one direction only would make the path asymmetric
    # even when idle (veth stamps TX after the qdisc), which no two-way probe can see.
    for dev in ("ck-ra", "ck-rb"):
        sh(*ns(R, "tc", "qdisc", "add", "dev", dev, "root", "tbf", *TBF.split()))


# Both ends run in this bench's own namespaces, as separate processes: a fixed key does.
PROBE_KEY = b"netspec-bench-ck"


def topology_down() -> None:
    for n in (A, R, B):
        for pid in sh("ip", "netns", "pids", n, check=False).stdout.split():
            sh("kill", "-9", pid, check=False)
        sh("ip", "netns", "del", n, check=False)


def serve(seconds: float) -> None:
    server = ProbeServer("0.0.0.0", PROBE_KEY, port=PORT)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        server.handle(0.1)


def probe(out: Path, seconds: float) -> None:
    client = ProbeClient(A_ADDR, PORT, PROBE_KEY)
    rows = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(INTERVAL_S * random.uniform(0.5, 1.5))
        rows.extend((ex.t1, ex.t2, ex.t3, ex.t4, ex.kernel) for ex in client.volley())
    np.save(out, np.array(rows, dtype=np.int64))


def chrony_conf(directory: Path, name: str, lines: list[str]) -> Path:
    conf = directory / f"chrony-{name}.conf"
    conf.write_text("\n".join([f"pidfile {directory}/chrony-{name}.pid",
                               f"bindcmdaddress {directory}/chrony-{name}.sock",
                               f"driftfile {directory}/chrony-{name}.drift", *lines]) + "\n")
    return conf


def chrony_offsets(sock: Path, until: float, out: list[tuple[float, float]]) -> None:
    """chrony's estimate of the system clock's offset (s), once a second. Under -x chrony
    keeps its corrections to itself, so tracking's "System time" is the offset it believes
    the untouched clock has; "Last offset" is only its latest measurement's residual."""
    while time.time() < until:
        time.sleep(1.0)
        done = sh("chronyc", "-h", str(sock), "-c", "tracking", check=False)
        fields = done.stdout.strip().split(",")
        if done.returncode == 0 and len(fields) > 5 and fields[1] != "":
            out.append((time.time(), float(fields[4])))


def cross_traffic(seconds: float) -> list[subprocess.Popen]:
    sink = subprocess.Popen(ns(A, sys.executable, "-c", (
        "import socket;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
        f"s.bind(('0.0.0.0',{CROSS_PORT}));s.listen();c,_=s.accept()\n"
        "while c.recv(1<<16): pass")))
    time.sleep(0.5)
    source = subprocess.Popen(ns(B, sys.executable, "-c", (
        f"import socket,time;c=socket.create_connection(('{A_ADDR}',{CROSS_PORT}));"
        f"e=time.time()+{seconds};b=bytes(1<<16)\n"
        "while time.time()<e: c.sendall(b)")))
    return [sink, source]


def figures(err: np.ndarray, bound: np.ndarray) -> dict[str, float]:
    a = np.abs(err)
    return {"p50_ns": float(np.percentile(a, 50)), "p99_ns": float(np.percentile(a, 99)),
            "max_ns": float(a.max()), "coverage": float(np.mean(a <= bound)),
            "median_bound_ns": float(np.median(bound))}


def evaluate(ex: Exchanges, spans: dict[str, tuple[int, int]]) -> dict[str, dict[str, float]]:
    result = fit("b", "a", ex)
    out = {}
    for phase, (start, end) in spans.items():
        grid = np.arange(start, end, 1_000_000, dtype=np.int64)
        converted, bound = result.to_global(grid)  # one clock: the truth is grid itself
        out[phase] = figures(converted - grid, bound)
    start, end = spans["idle"]
    idle = ex.select((ex.t1 >= start) & (ex.t4 < end))
    theta = warp(offset_ns=-2_500_000_000, drift_ppm=50.0, wander_ppm=0.5, period_s=20.0)
    warped = Exchanges(idle.t1 + theta(idle.t1), idle.t2, idle.t3, idle.t4 + theta(idle.t4), idle.kernel)
    grid = np.arange(start, end, 1_000_000, dtype=np.int64)
    converted, bound = fit("b", "a", warped).to_global(grid + theta(grid))
    out["warp"] = figures(converted - grid, bound)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--probe", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve)
    if args.probe:
        return probe(Path(args.probe[0]), float(args.probe[1]))
    if os.geteuid() != 0 or not shutil.which("stress-ng") or not shutil.which("chronyd"):
        sys.exit("bench/clksync.py needs root, stress-ng and chrony")
    total = 3 * args.seconds + 6
    work = Path(tempfile.mkdtemp(prefix="nsck-"))
    topology_up()
    procs = []
    try:
        ours = work / "exchanges.npy"
        procs.append(subprocess.Popen(ns(A, sys.executable, __file__, "--serve", str(total + 5))))
        chrony_a = chrony_conf(work, "a", ["local stratum 1", "allow all", "port 123"])
        chrony_b = chrony_conf(work, "b", [f"server {A_ADDR} iburst minpoll -2 maxpoll -2", "port 0"])
        procs.append(subprocess.Popen(ns(A, "chronyd", "-x", "-d", "-u", "root", "-f", str(chrony_a)),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen(ns(B, "chronyd", "-x", "-d", "-u", "root", "-f", str(chrony_b)),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        time.sleep(0.5)
        procs.append(subprocess.Popen(ns(B, sys.executable, __file__, "--probe", str(ours), str(total))))
        start = time.time()
        chrony: list[tuple[float, float]] = []
        watcher = threading.Thread(target=chrony_offsets,
                                   args=(work / "chrony-b.sock", start + total, chrony))
        watcher.start()
        spans: dict[str, tuple[int, int]] = {}
        time.sleep(3)  # the fit's first seconds have exchanges on one side only
        for phase in PHASES:
            begin = time.time_ns()
            load = []
            if phase == "cpu":
                load = [subprocess.Popen(["stress-ng", "--cpu", "2", "--timeout", f"{int(args.seconds)}s"],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
            elif phase == "traffic":
                load = cross_traffic(args.seconds)
            time.sleep(args.seconds)
            for p in load:
                p.kill()
                p.wait()
            spans[phase] = (begin, time.time_ns())
            print(f"  {phase} done", file=sys.stderr)
        procs[-1].wait()
        watcher.join()
        rows = np.load(ours)
        ex = Exchanges.from_rows([(*r[:4].tolist(), bool(r[4])) for r in rows])
        result = evaluate(ex, spans)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        topology_down()
    chrony_err = {phase: [abs(o) * 1e9 for t, o in chrony if s / 1e9 <= t < e / 1e9]
                  for phase, (s, e) in spans.items()}
    print(f"clksync: {len(ex)} exchanges ({int(ex.kernel.sum())} kernel-stamped) over "
          f"a -> router (tbf {TBF}) -> b, {args.seconds:g} s per phase")
    print(f"{'phase':<8} {'p50':>8} {'p99':>8} {'max':>8} {'coverage':>9} {'bound':>8}"
          f" | chrony p50 {'p99':>8} {'n':>4}   (|error| in us)")
    for phase, f in result.items():
        c = chrony_err.get(phase) or []
        chrony_fig = (f"{np.percentile(c, 50) / 1e3:>10.2f} {np.percentile(c, 99) / 1e3:>8.2f} {len(c):>4}"
                      if c else f"{'-':>10} {'-':>8} {0:>4}")
        print(f"{phase:<8} {f['p50_ns'] / 1e3:>8.3f} {f['p99_ns'] / 1e3:>8.3f} {f['max_ns'] / 1e3:>8.3f}"
              f" {f['coverage'] * 100:>8.3f}% {f['median_bound_ns'] / 1e3:>8.2f} | {chrony_fig}")
        if c:
            f["chrony_p50_ns"] = float(np.percentile(c, 50))
            f["chrony_p99_ns"] = float(np.percentile(c, 99))
    print(json.dumps({"bench": "clksync", "seconds_per_phase": args.seconds, "exchanges": len(ex),
                      "phases": result}))


if __name__ == "__main__":
    main()
