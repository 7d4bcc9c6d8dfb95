"""The packets: service's cost and truth, on two namespaced SSH hosts this bench builds and
removes (root only; tests/nethosts.py).

One run of `ns_control run` per rate (--rates, packets a second, a UDP sender on host a to a
receiver on b for --seconds), with `services: {packets: {ports: [9500]}}`; then one across a
link delayed --delay-ms. Per run, from the captures' records (protocol/packets.py) and the
merge's packets.parquet:
  cost:   tcpdump's CPU (user + system, from /proc as it stops) per packet it captured, on a;
          the baseline in the same run: the sender's own CPU per packet it sent (a Python
          sendto), so the ratio says what capturing adds to sending;
  drops:  what each capture's kernel buffer dropped, and what it left unread;
  match:  the share of a's sends matched with b's receipts (target: 99.9 % where nothing
          was dropped);
  truth:  a bare veth's one-way delay (kernel to kernel, about a microsecond, plus the clock
          bound); on the delayed link, the one-way p50 against the delay set (the issue's
          bound: max(5 %, 250 us)).
Prints figures for people, then one JSON object as its last line; exits 1 if a run was not
ok.

    .venv/bin/python bench/packets.py [--rates 1000,10000,50000] [--seconds 2] [--delay-ms 5]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
from netspec.protocol.packets import PACKETS_DIR, read_records
from netspec.protocol.runrecord import read_run

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import nethosts

# A sender at `rate` packets a second for `seconds`: a burst each millisecond, its own CPU
# (user + system, from its rusage) printed at its end.
SENDER = ("import resource, socket, sys, time\\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\\n"
          "rate, seconds, to = float(sys.argv[1]), float(sys.argv[2]), (sys.argv[3], 9500)\\n"
          "start, n = time.monotonic(), 0\\nwhile (now := time.monotonic() - start) < seconds:\\n"
          "    while n < rate * now:\\n        s.sendto(n.to_bytes(8, 'big') * 4, to); n += 1\\n"
          "    time.sleep(0.001)\\nu = resource.getrusage(resource.RUSAGE_SELF)\\n"
          "print(n, u.ru_utime + u.ru_stime)")
RECEIVER = ("import socket\\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\\n"
            "s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)\\n"
            "s.bind(('0.0.0.0', 9500))\\nwhile True:\\n    s.recv(100)")


def experiment(a, b, rate: float, seconds: float, delay_ms: float | None,
               buffer_kib: int | None = None) -> str:
    links = f"links:\n  - {{between: [a, b], delay: {delay_ms:g}ms}}\n" if delay_ms else ""
    buffer = f", buffer_kib: {buffer_kib}" if buffer_kib else ""
    # with a small buffer, busy processes on every core besides, so that the capture falls behind
    busy = (f"faults:\n  - {{cpu: a, at: {{phase: work, after: 0s}}, for: {seconds:g}s, workers: "
            f"{os.cpu_count() or 2}}}\n") if buffer_kib else ""
    return f"""\
experiment: packets-bench
hosts:
  a: {{ssh: {a.alias}, accept_new_host_key: true}}
  b: {{ssh: {b.alias}, accept_new_host_key: true}}
{links}services: {{packets: {{ports: [9500]{buffer}}}}}
components:
  recv: {{host: b, command: [python3, -c, "{RECEIVER}"], start: start_logging, stop: stop_logging}}
  send: {{host: a, command: [python3, -c, "{SENDER}", "{rate:g}", "{seconds:g}", {b.address}], start: work}}
schedule: [launch, sync_clocks, start_logging, work, stop_logging, collect]
{busy}"""


def one(hosts, scratch: Path, env: dict[str, str], rate: float, seconds: float,
        delay_ms: float | None, buffer_kib: int | None = None) -> dict:
    path = scratch / "packets.yaml"
    path.write_text(experiment(*hosts[:2], rate, seconds, delay_ms, buffer_kib))
    argv = [sys.executable, "-m", "netspec.controller.cli", "run", str(path)]
    out = subprocess.run(argv, cwd=scratch, env=env, capture_output=True, text=True, timeout=600)
    run = scratch / "runs" / "latest"
    record = read_run(run)
    sent, sender_cpu = (float(v) for v in (run / "hosts" / "a" / "send" / "stdout").read_text().split())
    captures = {h: [r for r in read_records(run / "hosts" / h / "streams" / PACKETS_DIR) if r.addresses]
                for h in ("a", "b")}
    on_a = captures["a"][0]
    packets = str(run / "merged" / "packets.parquet")
    matched, p50, p99, bound = duckdb.sql(
        f"SELECT count(*) FILTER (WHERE matched), median(one_way_ns), quantile_cont(one_way_ns, 0.99), "
        f"median(bound_ns) FROM '{packets}' WHERE src_host = 'a' AND flow LIKE '%:9500'").fetchall()[0]
    return {"rate": rate, "delay_ms": delay_ms, "buffer_kib": buffer_kib,
            "ok": out.returncode == 0 and record.status == "ok",
            "sent": int(sent), "matched": int(matched), "match_pct": round(100 * matched / max(sent, 1), 3),
            "capture_us_per_packet": round(1e6 * (on_a.cpu_s or 0) / max(on_a.captured or 1, 1), 3),
            "sender_us_per_packet": round(1e6 * sender_cpu / max(sent, 1), 3),
            "capture_cpu_pct": round(100 * (on_a.cpu_s or 0) / seconds, 2),
            "dropped": sum((r.dropped or 0) for rs in captures.values() for r in rs),
            "unread": sum(max(0, (r.received or 0) - (r.captured or 0) - (r.dropped or 0))
                          for rs in captures.values() for r in rs),
            "one_way_p50_us": round(p50 / 1e3, 3), "one_way_p99_us": round(p99 / 1e3, 3),
            "bound_p50_us": round(bound / 1e3, 3), "said": "" if out.returncode == 0 else out.stdout[-1500:]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1000,10000,50000")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--delay-ms", type=float, default=5.0)
    args = parser.parse_args()
    if os.geteuid() != 0 or nethosts.why_unavailable():
        raise SystemExit(f"bench/packets.py needs root and namespaced hosts: {nethosts.why_unavailable()}")
    prefix = f"np{secrets.token_hex(2)}"
    hosts = nethosts.up(2, prefix=prefix, owner=os.getpid())
    rows = []
    try:
        env = {**os.environ, "NETSPEC_SSH_CONFIG": str(hosts[0].set.ssh_config)}
        with tempfile.TemporaryDirectory(prefix="packets-bench-") as scratch:
            for rate in (float(r) for r in args.rates.split(",")):
                rows.append(one(hosts, Path(scratch), env, rate, args.seconds, None))
            rows.append(one(hosts, Path(scratch), env, 1000.0, args.seconds, args.delay_ms))
            # the drop count, where the capture cannot keep up: the fastest rate through a buffer
            # of 64 KiB (some 400 packets) while its host's CPUs are busy
            rows.append(one(hosts, Path(scratch), env, max(float(r) for r in args.rates.split(",")),
                            args.seconds, None, 64))
    finally:
        nethosts.down(prefix)
    print(f"packets: service, 2 namespaced SSH hosts, UDP a -> b for {args.seconds:g} s a run")
    print(f"  {'rate/s':>7} {'delay':>6} {'buffer':>6} {'sent':>7} {'matched %':>9} {'capture us/pkt':>14} "
          f"{'sender us/pkt':>13} {'ratio':>6} {'capture CPU %':>13} {'dropped':>7} {'unread':>6} "
          f"{'one way p50 us':>14} {'p99 us':>9} {'bound us':>8}")
    for r in rows:
        ratio = r["capture_us_per_packet"] / r["sender_us_per_packet"] if r["sender_us_per_packet"] else 0
        r["capture_over_send"] = round(ratio, 3)
        print(f"  {r['rate']:7.0f} {(r['delay_ms'] or 0):5g}ms {r['buffer_kib'] or 8192:5d}K {r['sent']:7d} "
              f"{r['match_pct']:9.3f} "
              f"{r['capture_us_per_packet']:14.3f} {r['sender_us_per_packet']:13.3f} {ratio:6.3f} "
              f"{r['capture_cpu_pct']:13.2f} {r['dropped']:7d} {r['unread']:6d} {r['one_way_p50_us']:14.1f} "
              f"{r['one_way_p99_us']:9.1f} {r['bound_p50_us']:8.1f}")
    delayed = rows[-2]
    within = abs(delayed["one_way_p50_us"] - args.delay_ms * 1e3) <= max(0.05 * args.delay_ms * 1e3, 250)
    print(f"  the delayed link's one-way p50 within max(5 %, 250 us) of {args.delay_ms:g} ms: "
          f"{'yes' if within else 'NO'}")
    for r in rows:
        if r["said"]:
            print(f"  problem at {r['rate']:g}/s: {r['said']}")
    print(json.dumps({"rows": [{k: v for k, v in r.items() if k != "said"} for r in rows],
                      "delay_within": within}))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
