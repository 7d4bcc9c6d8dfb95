"""Link conditions, configured against achieved, on two namespaced hosts this bench builds
and removes (root only; tests/nethosts.py).

Host h1 sends numbered UDP datagrams stamped with their send time to h2, which takes the
kernel's receive stamp (SO_TIMESTAMPNS); both namespaces share one CLOCK_REALTIME, so each
one-way delay is exact. Per backend and condition:
  delay:     1, 10, 50 ms (and a jitter of 2 ms) at 10,000 packets/s; p50 against configured,
             its bound the target (max(5 %, 100 us) on the kernel's path, max(5 %, 250 us) on
             the user-space path);
  loss:      1 % and 5 % over 20,000 packets; achieved against configured, with its Wilson
             95 % interval (the target: the configured rate inside it);
  rate:      10 and 100 Mbit/s, sent at 1.3x for a second; achieved from the receiver's bytes
             (the target: within 5 %);
  partition: at 10,000 packets/s, when the first packet was lost against the instant the
             partition was applied (the target: within 1 ms);
  CPU:       the sending process's system CPU per packet with the condition, less without
             (os.times' resolution is 10 ms: over 20,000 packets, 0.5 us a packet);
  probes:    the audit's probe rate (links/probes.py) against 1 % of each rate's capacity.
Backends: the kernel's (tbf for rate, iptables' statistic match for loss, iptables DROP for
a partition, netem for delay and jitter where present: this kernel has no sch_netem, said
absent); netspec's user-space path (NFQUEUE) where `netspec.links` offers it, said absent
otherwise. Every rule lives in the bench's own namespaces, which go with it.
Prints figures for people, then one JSON object as its last line.

    sudo .venv/bin/python bench/links.py [--seconds 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from netspec.links.probes import MAX_SHARE, WIRE_OVERHEAD, enable_stamps, probe_size, probes_per_s, rx_stamp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import nethosts

PORT = 47_123
HEAD = struct.Struct("!qq")  # seq, sent_ns
PPS = 10_000
LOSS_PACKETS = 20_000
DELAYS_MS = (1.0, 10.0, 50.0)
JITTER_MS = 2.0
LOSSES_PCT = (1.0, 5.0)
RATES_MBIT = (10.0, 100.0)
RATE_PAYLOAD = 1200
RATE_OVER = 1.3
QUIET_S = 1.0  # the receiver's end: this long without a datagram (the sender is done)


def pace(total: int, pps: float, send) -> float:
    """Call send(i) for i in range(total) at `pps`; the system CPU seconds it took (the
    kernel's work on the sends, netfilter's and the qdisc's included; the pacing's spin is
    user time, left out)."""
    cpu0, start = os.times().system, time.monotonic()
    for i in range(total):
        due = start + i / pps
        while (now := time.monotonic()) < due:
            if due - now > 0.001:
                time.sleep(due - now - 0.0005)
        send(i)
    return os.times().system - cpu0


def role_send(address: str, count: int, pps: float, size: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    pad = bytes(max(0, size - HEAD.size))
    errors, stamps = 0, []

    def send(i: int) -> None:
        nonlocal errors
        now = time.time_ns()
        stamps.append(now)
        try:
            sock.sendto(HEAD.pack(i, now) + pad, (address, PORT))
        except OSError:
            errors += 1  # a partition's DROP on OUTPUT: EPERM
    print("sending", flush=True)
    cpu = pace(count, pps, send)
    print(json.dumps({"cpu_s": cpu, "errors": errors, "stamps": stamps}), flush=True)


def role_recv(until_ns: int) -> None:
    """Receive until QUIET_S pass without a datagram after the first, or until `until_ns`."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind(("0.0.0.0", PORT))
    enable_stamps(sock)
    sock.settimeout(0.05)
    print("ready", flush=True)
    got, last = [], None
    while time.time_ns() < until_ns and (last is None or time.monotonic() - last < QUIET_S):
        try:
            data, anc, _, _ = sock.recvmsg(2048, 64)
        except TimeoutError:
            continue
        last = time.monotonic()
        seq, sent = HEAD.unpack_from(data)
        got.append((seq, sent, rx_stamp(anc) or time.time_ns(), len(data)))
    sys.stdout.write(json.dumps(got) + "\n")


class Link:
    """h1 -> h2 in the bench's namespaces."""

    def __init__(self, h1: nethosts.NetHost, h2: nethosts.NetHost):
        self.h1, self.h2 = h1, h2

    def ns(self, host: nethosts.NetHost, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", host.netns, *argv], capture_output=True, text=True,
                              timeout=30, check=True)

    def measure(self, count: int, pps: float, size: int = 64, during=None) -> tuple[list, dict]:
        """Send `count` datagrams at `pps` from h1 to h2; what h2 received and the sender's
        figures. `during(start_ns)`, if given, is called in this process while they go."""
        until = time.time_ns() + int((count / pps + 30) * 1e9)
        me = [sys.executable, __file__]
        recv = subprocess.Popen(["ip", "netns", "exec", self.h2.netns, *me, "_recv", str(until)],
                                stdout=subprocess.PIPE, text=True)
        try:
            assert recv.stdout is not None
            if recv.stdout.readline().strip() != "ready":
                raise SystemExit("the receiver did not start")
            send = subprocess.Popen(["ip", "netns", "exec", self.h1.netns, *me, "_send", self.h2.address,
                                     str(count), str(pps), str(size)], stdout=subprocess.PIPE, text=True)
            assert send.stdout is not None
            send.stdout.readline()  # "sending": its imports are behind it
            extra = during(time.time_ns()) if during is not None else None
            out, _ = send.communicate(timeout=count / pps + 30)
            got = json.loads(recv.stdout.readline())
            recv.wait(timeout=10)
        finally:
            for p in (recv,):
                if p.poll() is None:
                    p.kill()
                    p.wait()
        figures = json.loads(out.strip().splitlines()[-1])
        figures["extra"] = extra
        return got, figures

    def tc(self, *argv: str) -> None:
        self.ns(self.h1, "tc", *argv)

    def iptables(self, *argv: str) -> None:
        self.ns(self.h1, "iptables", *argv)


def netem_present(link: Link) -> bool:
    try:
        link.tc("qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
    except subprocess.CalledProcessError:
        return False
    link.tc("qdisc", "del", "dev", "lo", "root")
    return True


def userspace_path() -> str | None:
    """Why netspec's user-space path cannot be benched here, or None when it can."""
    try:
        import netspec.links.userspace  # noqa: F401  (engineer `links`'s NFQUEUE path)
    except ImportError:
        return "netspec.links.userspace is not in this tree yet"
    return "the bench does not drive netspec.links.userspace yet"


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def delays(absent: dict[str, str | None]) -> list[dict]:
    """The delay rows: every backend here is absent (no netem; the user-space path not in
    this tree), each with its target bound."""
    rows = []
    for ms in DELAYS_MS:
        for backend, why in (("kernel", absent.get("netem")), ("user", absent.get("user"))):
            floor = 0.1 if backend == "kernel" else 0.25
            rows.append({"backend": backend, "configured_ms": ms, "achieved_p50_ms": None,
                         "bound_ms": max(0.05 * ms, floor), "absent": why})
    return rows


def losses(link: Link, prefix: str, base_cpu: float, result: dict) -> None:
    from netspec.analysis.links import wilson  # here: the namespaces' roles do without duckdb

    for pct in LOSSES_PCT:
        link.iptables("-A", "OUTPUT", "-d", link.h2.address, "-p", "udp", "--dport", str(PORT),
                      "-m", "statistic", "--mode", "random", "--probability", f"{pct / 100:.4f}",
                      "-m", "comment", "--comment", f"netspec-bench-{prefix}", "-j", "DROP")
        got, fig = link.measure(LOSS_PACKETS, PPS)
        link.iptables("-F", "OUTPUT")
        lost = LOSS_PACKETS - len(got)
        lo, hi = wilson(lost, LOSS_PACKETS)
        row = {"backend": "kernel", "configured_pct": pct,
               "achieved_pct": round(100 * lost / LOSS_PACKETS, 3),
               "interval_pct": [round(100 * lo, 3), round(100 * hi, 3)], "inside": lo <= pct / 100 <= hi}
        result["loss"].append(row)
        cpu_us = (fig["cpu_s"] / LOSS_PACKETS - base_cpu) * 1e6
        result["cpu_us_per_packet"].append({"backend": "kernel", "condition": f"loss {pct:g} %",
                                            "us": round(cpu_us, 3)})
        print(f"  loss, kernel (iptables statistic): {pct:g} % set, {row['achieved_pct']:.2f} % achieved "
              f"[{row['interval_pct'][0]:.2f}, {row['interval_pct'][1]:.2f}] "
              f"({'inside' if row['inside'] else 'OUTSIDE'} its 95 % interval); "
              f"{cpu_us:+.2f} us system CPU/packet")
        result["loss"].append({"backend": "user", "configured_pct": pct, "achieved_pct": None,
                               "absent": result["absent"]["user"]})


def rates(link: Link, seconds: float, result: dict) -> None:
    for mbit in RATES_MBIT:
        link.tc("qdisc", "add", "dev", "eth0", "root", "tbf", "rate", f"{mbit:g}mbit", "burst",
                f"{max(16, int(mbit * 1e6 / 8 / 250 / 1024))}kb", "latency", "50ms")
        pps = RATE_OVER * mbit * 1e6 / ((RATE_PAYLOAD + WIRE_OVERHEAD - 4) * 8)
        got, _ = link.measure(int(pps * seconds), pps, RATE_PAYLOAD)
        link.tc("qdisc", "del", "dev", "eth0", "root")
        stamps = sorted(r for _, _, r, _ in got)
        # The steady state: past the bucket's first burst, up to the last arrival.
        first = stamps[0] + (stamps[-1] - stamps[0]) // 5
        bits = sum((size + WIRE_OVERHEAD - 4) * 8 for _, _, r, size in got if r > first)
        achieved = bits / ((stamps[-1] - first) / 1e9) / 1e6
        off = 100 * (achieved - mbit) / mbit
        result["rate"] += [{"backend": "kernel", "configured_mbit": mbit, "achieved_mbit": round(achieved, 3),
                            "off_pct": round(off, 2)},
                           {"backend": "user", "configured_mbit": mbit, "achieved_mbit": None,
                            "absent": result["absent"]["user"]}]
        print(f"  rate, kernel (tbf): {mbit:g} Mbit/s set, {achieved:.2f} achieved (IP packets and their "
              f"Ethernet headers, {off:+.2f} %), sent at {RATE_OVER:g}x")
        size = probe_size("h1")
        per_s = probes_per_s(mbit * 1e6, size)
        share = 100 * per_s * (size + WIRE_OVERHEAD) * 8 / (mbit * 1e6)
        result["probes"].append({"rate_mbit": mbit, "probes_per_s": round(per_s, 1),
                                 "share_pct": round(share, 3)})
        print(f"  the audit's probes on a {mbit:g} Mbit/s link: {per_s:.1f}/s, {share:.3f} % of its "
              f"capacity (at most {100 * MAX_SHARE:g} %)")


def partition(link: Link, prefix: str, seconds: float, result: dict) -> None:
    n = int(PPS * seconds)

    def cut(start_ns: int) -> tuple[int, int]:
        time.sleep(max(0.0, (start_ns + int(seconds / 2 * 1e9) - time.time_ns()) / 1e9))
        before = time.time_ns()
        link.iptables("-I", "OUTPUT", "-d", link.h2.address, "-m", "comment", "--comment",
                      f"netspec-bench-{prefix}", "-j", "DROP")
        return before, time.time_ns()
    got, fig = link.measure(n, PPS, during=cut)
    link.iptables("-F", "OUTPUT")
    before, after = fig["extra"]
    seqs, stamps = {seq for seq, _, _, _ in got}, fig["stamps"]
    lost = [q for q in range(n) if q not in seqs and stamps[q] >= before - 50_000_000]
    first_lost = stamps[lost[0]] if lost else after
    leaked = sum(1 for q in seqs if stamps[q] > after)
    result.update(partition_effect_ms=round((first_lost - after) / 1e6, 3),
                  partition_from_start_ms=round((first_lost - before) / 1e6, 3),
                  partition_apply_ms=round((after - before) / 1e6, 3), partition_leaked=leaked)
    print(f"  partition, kernel (iptables DROP): the iptables command took {(after - before) / 1e6:.2f} ms; "
          f"the first packet lost was sent {(first_lost - after) / 1e6:+.3f} ms from its return "
          f"({(first_lost - before) / 1e6:+.3f} ms from its start); {leaked} packets through after it")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="how long each delay, rate and "
                        "partition measurement sends")
    args = parser.parse_args()
    if os.geteuid() != 0 or nethosts.why_unavailable():
        raise SystemExit(f"bench/links.py needs root and namespaced hosts: {nethosts.why_unavailable()}")
    prefix = f"nl{secrets.token_hex(2)}"
    hosts = nethosts.up(2, prefix=prefix, owner=os.getpid())
    result: dict = {"delay": [], "loss": [], "rate": [], "partition_effect_ms": None,
                    "cpu_us_per_packet": [], "probes": [], "absent": {}}
    try:
        link = Link(*hosts)
        n = int(PPS * args.seconds)
        got, base = link.measure(n, PPS)
        base_cpu = base["cpu_s"] / n
        base_p50 = percentile([(r - s) / 1e6 for _, s, r, _ in got], 50)
        print(f"link conditions on namespaced hosts (h1 -> h2), {PPS} packets/s; with none: p50 "
              f"{base_p50 * 1e3:.1f} us, {len(got)}/{n} received, {base_cpu * 1e6:.2f} us system CPU/packet")
        result["absent"]["user"] = userspace_path()
        if not netem_present(link):
            result["absent"]["netem"] = "this kernel has no sch_netem"
        print(f"  delay and jitter, kernel (netem): absent: {result['absent'].get('netem', 'no: present')}")
        print(f"  user-space path (NFQUEUE): absent: {result['absent']['user']}")
        result["delay"] = delays(result["absent"])
        losses(link, prefix, base_cpu, result)
        rates(link, args.seconds, result)
        partition(link, prefix, args.seconds, result)
    finally:
        nethosts.down(prefix)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_send":
        role_send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) > 1 and sys.argv[1] == "_recv":
        role_recv(int(sys.argv[2]))
    else:
        sys.exit(main())
