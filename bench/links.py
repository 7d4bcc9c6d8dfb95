"""Link conditions through netspec.links' own backends, configured against achieved, on two
namespaced hosts this bench builds and removes (root only; tests/nethosts.py).

Host h1 sends numbered UDP datagrams stamped with their send time to h2, which takes the
kernel's receive stamp (SO_TIMESTAMPNS); both namespaces share one CLOCK_REALTIME, so each
one-way delay is exact. The condition is applied on h1 toward h2 by netspec.links' LinkSet, as
netspecd applies it (a process of its own in h1's namespace), with the backend it places each
part on; a backend is benched alone by taking the ones before it as absent. Per condition:
  delay:     1, 10, 50 ms, and 10 ms with a jitter of 2 ms (normal), at 10,000 packets/s: p50
             against configured, the target bound max(5 %, 100 us) on the kernel's path
             (netem: absent on this kernel, said so) and max(5 %, 250 us) on the user-space path;
  loss:      1 % and 5 % over 10,000 packets, by nftables and by the user-space path; achieved
             with its Wilson 95 % interval (the target: the configured rate inside it);
  rate:      10 and 100 Mbit/s by htb, sent at 1.3x for a second; achieved from the bytes h2
             received (the target: within 5 %);
  partition: by nftables and by the user-space path, at 10,000 packets/s: the send stamp of
             the first packet lost against the window netspec records the change took effect
             in (from just before its submission, `began_ns`, to just after it returned,
             `applied_ns`): whether it fell inside, and its distance from the recorded
             instant (the window's midpoint) against the window's half-width (the target:
             within 1 ms);
  CPU:       per packet: the user-space path's process, or the sender's system CPU with the
             kernel's condition less without;
  probes:    the audit's probe rate (links/probes.py) against 1 % of each rate's capacity;
  tcp:       real TCP (tests/tcplink.py) across 1, 10, 50 and 200 ms each way, a rate of 50
             Mbit/s h1 -> h2: a request written in two send()s (TCP_NODELAY) against a
             connect across the same link, both one round trip on a real link (the target:
             within max(5 %, 250 us)); a bulk transfer's steady rate (its first 8 round trips
             left out: slow start) against what the rate and the sockets' buffers allow at
             that round trip, computed here (the target: at least 80 % of it).
Prints figures for people, then one JSON object as its last line.

    sudo .venv/bin/python bench/links.py [--seconds 1.0] [--only delay,loss,rate,partition,tcp]
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
import tcplink

PORT = 47_123
TCP_PORT = 47_124
TCP_DELAYS_MS = (1.0, 10.0, 50.0, 200.0)
TCP_RATE_MBIT = 50.0
TCP_REQUESTS = 10
HEAD = struct.Struct("!qq")  # seq, sent_ns
PPS = 10_000
LOSS_PACKETS = 10_000
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


def role_apply(run_id: str, peer: str, condition: str, without: str, wait: str = "") -> None:
    """In h1's namespace: apply `condition` (a LinkCondition's JSON) toward `peer` with
    netspec.links' LinkSet, as netspecd does, the backends in `without` (offer fields, comma
    separated) taken as absent so that the next one applies the part; say when it was in
    effect and where each part went, hold it until stdin closes, then say the backends'
    counters and this process's CPU (the user-space path's thread is in it) and remove it.
    With `wait`, apply only at a line on stdin (its imports and probe long done)."""
    import msgspec
    from netspec.links import Exclude, LinkSet, offer
    from netspec.protocol.links import LinkCondition, LinkRule

    have = offer()
    for name in filter(None, without.split(",")):
        setattr(have, name, False)
    links = LinkSet(run_id, "h1", Exclude(tcp=(22,)), have=have)
    try:
        rule = LinkRule(peer="h2", address=peer, condition=msgspec.json.decode(condition, type=LinkCondition))
        if wait:
            print("ready", flush=True)
            sys.stdin.readline()
        applied = links.apply([rule])
        cpu0 = sum(os.times()[:2])
        print(json.dumps({"began_ns": applied.began_ns, "applied_ns": applied.applied_ns,
                          "at_ns": applied.at_ns, "half_ns": applied.half_ns,
                          "parts": applied.placements["h2"].parts}), flush=True)
        sys.stdin.read()
        print(json.dumps({"stats": msgspec.to_builtins(links.stats()), "cpu_s": sum(os.times()[:2]) - cpu0}),
              flush=True)
    finally:
        links.close()


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

    def apply(self, run_id: str, condition: dict, without: str = "", wait: bool = False) -> subprocess.Popen:
        """netspec.links' backends applying `condition` on h1 toward h2, until `release`; with
        `wait`, ready to apply it at `go`."""
        argv = ["_apply", run_id, self.h2.address, json.dumps(condition), without, "1" if wait else ""]
        proc = subprocess.Popen(["ip", "netns", "exec", self.h1.netns, sys.executable, __file__, *argv],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        if wait:
            if proc.stdout.readline().strip() != "ready":
                proc.wait(timeout=30)
                raise SystemExit(f"netspec.links could not get ready to apply {condition}")
            return proc
        return self.applied(proc, condition)

    def go(self, proc: subprocess.Popen, condition: dict) -> subprocess.Popen:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        return self.applied(proc, condition)

    def applied(self, proc: subprocess.Popen, condition: dict) -> subprocess.Popen:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            proc.wait(timeout=30)
            raise SystemExit(f"netspec.links could not apply {condition} (exit {proc.returncode})")
        proc.applied = json.loads(line)  # type: ignore[attr-defined]
        return proc

    def release(self, proc: subprocess.Popen) -> dict:
        out, _ = proc.communicate("", timeout=60)
        return json.loads(out.strip().splitlines()[-1])

    def tc(self, *argv: str) -> None:
        self.ns(self.h1, "tc", *argv)

    def iptables(self, *argv: str) -> None:
        self.ns(self.h1, "iptables", *argv)


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def backends(without: str) -> str:
    return "user" if without else "kernel"


def delays(link: Link, prefix: str, n: int, result: dict) -> None:
    """Delay (and jitter) through netspec.links at PPS: netem's where the kernel has it, the
    user-space path's here."""
    cases = [(ms, 0.0, PPS) for ms in DELAYS_MS] + [(10.0, JITTER_MS, PPS), (10.0, 0.0, PPS // 10)]
    for i, (ms, jitter, pps) in enumerate(cases):
        applier = link.apply(f"{prefix}d{i}", {"delay_ms": ms, "jitter_ms": jitter})
        parts = applier.applied["parts"]
        count = n * pps // PPS  # a second's packets at the lower rate too
        got, _ = link.measure(count, pps)
        after = link.release(applier)
        delays_ms = [(r - s) / 1e6 for _, s, r, _ in got]
        backend = "netem" if parts.get("delay") == "netem" else parts.get("delay", "?")
        bound = max(0.05 * ms, 0.1 if backend == "netem" else 0.25)
        p50, p99 = percentile(delays_ms, 50), percentile(delays_ms, 99)
        mean = sum(delays_ms) / len(delays_ms)
        std = (sum((d - mean) ** 2 for d in delays_ms) / max(1, len(delays_ms) - 1)) ** 0.5
        stats = after["stats"]["peers"].get("h2", {})
        row = {"backend": backend, "configured_ms": ms, "configured_jitter_ms": jitter,
               "packets_per_s": pps,
               "achieved_p50_ms": round(p50, 4), "achieved_p99_ms": round(p99, 4),
               "achieved_jitter_ms": round(std, 4), "bound_ms": bound, "within": abs(p50 - ms) <= bound,
               "received": len(got), "sent": count, "late_over_1ms": stats.get("late_over_1ms"),
               "late_max_ms": round(stats.get("late_max_ns", 0) / 1e6, 3)}
        result["delay"].append(row)
        result["cpu_us_per_packet"].append({"backend": backend, "condition": f"delay {ms:g} ms",
                                            "us": round(after["cpu_s"] / count * 1e6, 2)})
        jit = f" ± {jitter:g} ms (normal): std {std:.3f} ms" if jitter else ""
        print(f"  delay, {backend}, {pps} packets/s: {ms:g} ms{jit}; p50 {p50:.3f} ms ({p50 - ms:+.3f}, "
              f"target ±{bound:.3f}: {'within' if row['within'] else 'OFF'}), p99 {p99:.3f} ms, "
              f"{len(got)}/{count} through; "
              f"late over 1 ms {row['late_over_1ms']}, at most {row['late_max_ms']} ms; "
              f"{after['cpu_s'] / count * 1e6:.1f} us CPU/packet")
    if not any(r["backend"] == "netem" for r in result["delay"]):
        result["delay"] += [{"backend": "kernel", "configured_ms": ms, "achieved_p50_ms": None,
                             "bound_ms": max(0.05 * ms, 0.1), "absent": result["absent"].get("netem")}
                            for ms in DELAYS_MS]


def losses(link: Link, prefix: str, base_cpu: float, result: dict) -> None:
    from netspec.analysis.links import wilson  # here: the namespaces' roles do without duckdb

    for pct in LOSSES_PCT:
        for without in ("nfqueue,netem", "nftables,netem"):  # nftables's, then the user-space path's
            applier = link.apply(f"{prefix}l{int(pct)}{len(without)}", {"loss_pct": pct}, without)
            backend = applier.applied["parts"].get("loss")
            got, fig = link.measure(LOSS_PACKETS, PPS)
            after = link.release(applier)
            lost = LOSS_PACKETS - len(got)
            lo, hi = wilson(lost, LOSS_PACKETS)
            row = {"backend": backend, "configured_pct": pct,
                   "achieved_pct": round(100 * lost / LOSS_PACKETS, 3),
                   "interval_pct": [round(100 * lo, 3), round(100 * hi, 3)], "inside": lo <= pct / 100 <= hi}
            result["loss"].append(row)
            cpu_us = (after["cpu_s"] / LOSS_PACKETS if backend == "user"
                      else fig["cpu_s"] / LOSS_PACKETS - base_cpu) * 1e6
            result["cpu_us_per_packet"].append({"backend": backend, "condition": f"loss {pct:g} %",
                                                "us": round(cpu_us, 2)})
            print(f"  loss, {backend}: {pct:g} % set, {row['achieved_pct']:.2f} % achieved "
                  f"[{row['interval_pct'][0]:.2f}, {row['interval_pct'][1]:.2f}] "
                  f"({'inside' if row['inside'] else 'OUTSIDE'} its 95 % interval); "
                  f"{cpu_us:+.2f} us CPU/packet "
                  f"({'the user-space path' if backend == 'user' else 'the sender, system, less with none'})")


def rates(link: Link, prefix: str, seconds: float, result: dict) -> None:
    for mbit in RATES_MBIT:
        applier = link.apply(f"{prefix}r{int(mbit)}", {"rate_mbit": mbit})
        backend = applier.applied["parts"].get("rate")
        pps = RATE_OVER * mbit * 1e6 / ((RATE_PAYLOAD + WIRE_OVERHEAD - 4) * 8)
        got, fig = link.measure(int(pps * seconds), pps, RATE_PAYLOAD)
        link.release(applier)
        sent = fig["stamps"]
        offered = len(sent) * (RATE_PAYLOAD + WIRE_OVERHEAD - 4) * 8 / ((sent[-1] - sent[0]) / 1e9) / 1e6
        stamps = sorted(r for _, _, r, _ in got)
        # The steady state: past the bucket's first burst, up to the last arrival.
        first = stamps[0] + (stamps[-1] - stamps[0]) // 5
        bits = sum((size + WIRE_OVERHEAD - 4) * 8 for _, _, r, size in got if r > first)
        achieved = bits / ((stamps[-1] - first) / 1e9) / 1e6
        off = 100 * (achieved - mbit) / mbit
        result["rate"] += [{"backend": backend, "configured_mbit": mbit, "achieved_mbit": round(achieved, 3),
                            "off_pct": round(off, 2), "within": abs(off) <= 5,
                            "offered_mbit": round(offered, 2)},
                           {"backend": "user", "configured_mbit": mbit, "achieved_mbit": None,
                            "absent": "netspec's user-space path applies no rate (htb does)"}]
        print(f"  rate, {backend}: {mbit:g} Mbit/s set, {achieved:.2f} achieved (IP packets and their "
              f"Ethernet headers, {off:+.2f} %); offered {offered:.2f} Mbit/s (asked {RATE_OVER:g}x"
              + (": the sender fell short, the link was not full)" if offered < mbit else ")"))
        size = probe_size("h1")
        per_s = probes_per_s(mbit * 1e6, size)
        share = 100 * per_s * (size + WIRE_OVERHEAD) * 8 / (mbit * 1e6)
        result["probes"].append({"rate_mbit": mbit, "probes_per_s": round(per_s, 1),
                                 "share_pct": round(share, 3)})
        print(f"  the audit's probes on a {mbit:g} Mbit/s link: {per_s:.1f}/s, {share:.3f} % of its "
              f"capacity (at most {100 * MAX_SHARE:g} %)")


def partitions(link: Link, prefix: str, seconds: float, result: dict) -> None:
    n = int(PPS * seconds)
    result["partition"] = []
    for without in ("", "nftables,netem"):
        applier = link.apply(f"{prefix}p{len(without)}", {"partition": True}, without, wait=True)

        def cut(start_ns: int, applier: subprocess.Popen = applier) -> None:
            time.sleep(max(0.0, (start_ns + int(seconds / 3 * 1e9) - time.time_ns()) / 1e9))
            link.go(applier, {"partition": True})
        got, fig = link.measure(n, PPS, during=cut)
        link.release(applier)
        applied = applier.applied
        backend, instant = applied["parts"].get("partition"), applied["at_ns"]
        began, ended, half = applied["began_ns"], applied["applied_ns"], applied["half_ns"]
        seqs, stamps = {seq for seq, _, _, _ in got}, fig["stamps"]
        lost = [q for q in range(n) if q not in seqs and stamps[q] >= began - 50_000_000]
        first_lost = stamps[lost[0]] if lost else None
        leaked = sum(1 for q in seqs if stamps[q] > ended)
        effect = None if first_lost is None else round((first_lost - instant) / 1e6, 3)
        inside = first_lost is not None and began <= first_lost <= ended
        result["partition"].append({"backend": backend, "effect_ms": effect,
                                    "half_window_ms": round(half / 1e6, 3), "inside_window": inside,
                                    "apply_ms": round((ended - began) / 1e6, 3), "leaked": leaked})
        said = ("no packet lost" if effect is None else
                f"the first packet lost was sent {effect:+.3f} ms from the instant netspec records, "
                f"{'inside' if inside else 'OUTSIDE'} its window (± {half / 1e6:.3f} ms)")
        print(f"  partition, {backend}: took effect in a {(ended - began) / 1e6:.2f} ms window; {said} "
              f"(target within 1 ms); {leaked} packets through after the window")
    result["partition_effect_ms"] = max((abs(p["effect_ms"]) for p in result["partition"]
                                         if p["effect_ms"] is not None), default=None)


def tcp(link: Link, prefix: str, seconds: float, result: dict) -> None:
    """Real TCP across the link (tests/tcplink.py), each delay both ways, a rate h1 -> h2."""
    window = tcplink.window_bytes(link.h1.netns, link.h2.netns)
    for ms in TCP_DELAYS_MS:
        rtt = 2 * ms
        forward, back = {"delay_ms": ms, "rate_mbit": TCP_RATE_MBIT}, {"delay_ms": ms}
        # Past slow start: eight round trips left out, and at least as long again measured.
        steady_from = 8 * rtt / 1e3
        transfer = max(seconds * 3, 2 * steady_from + 1.0)
        with tcplink.linked(link.h1, link.h2, f"{prefix}t{int(ms)}", TCP_PORT, forward, back) as sender:
            asked = tcplink.client(link.h1.netns, "requests", link.h2.address, str(TCP_PORT),
                                   str(TCP_REQUESTS))
            moved = tcplink.client(link.h1.netns, "bulk", link.h2.address, str(TCP_PORT), str(transfer),
                                   str(steady_from))
        connect = percentile(asked["connect_ms"], 50)
        two_send = percentile(asked["two_send_ms"], 50)
        bound = tcplink.bulk_bound_mbit(TCP_RATE_MBIT, rtt, window)
        achieved = moved["steady_mbit"]
        backend = sender["first"]["parts"].get("delay", "?")
        row = {"backend": backend, "delay_ms": ms, "connect_ms": round(connect, 3),
               "two_send_ms": round(two_send, 3), "two_send_over_connect": round(two_send / connect, 4),
               "two_send_within": abs(two_send - connect) <= max(0.05 * connect, 0.25),
               "bulk_mbit": None if achieved is None else round(achieved, 3),
               "bulk_bound_mbit": round(bound, 3),
               "bulk_within": achieved is not None and achieved >= 0.8 * bound,
               "retransmitted": moved["retransmitted"]}
        result["tcp"].append(row)
        print(f"  tcp, {backend}, {ms:g} ms each way: two writes {two_send:.2f} ms against a connect's "
              f"{connect:.2f} ms ({row['two_send_over_connect']:.3f}x, target within max(5 %, 250 us): "
              f"{'within' if row['two_send_within'] else 'OFF'}); bulk {_mbit(achieved)} Mbit/s of "
              f"{bound:.2f} the rate ({TCP_RATE_MBIT:g} Mbit/s) and the buffers ({window} bytes) allow "
              f"at {rtt:g} ms ({'at least 80 %' if row['bulk_within'] else 'UNDER 80 %'}), "
              f"{moved['retransmitted']} segments retransmitted")
    if not any(r["backend"] == "netem" for r in result["tcp"]):
        result["tcp"] += [{"backend": "netem", "delay_ms": ms, "two_send_over_connect": None,
                           "bulk_mbit": None, "bulk_bound_mbit": None,
                           "absent": result["absent"].get("netem")}
                          for ms in TCP_DELAYS_MS]


def _mbit(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="how long each delay, rate and "
                        "partition measurement sends")
    parser.add_argument("--only", default="delay,loss,rate,partition,tcp",
                        help="which measurements, comma separated")
    args = parser.parse_args()
    if os.geteuid() != 0 or nethosts.why_unavailable():
        raise SystemExit(f"bench/links.py needs root and namespaced hosts: {nethosts.why_unavailable()}")
    prefix = f"nl{secrets.token_hex(2)}"
    hosts = nethosts.up(2, prefix=prefix, owner=os.getpid())
    result: dict = {"delay": [], "loss": [], "rate": [], "partition_effect_ms": None,
                    "cpu_us_per_packet": [], "probes": [], "tcp": [], "absent": {}}
    try:
        link = Link(*hosts)
        n = int(PPS * args.seconds)
        got, base = link.measure(n, PPS)
        base_cpu = base["cpu_s"] / n
        base_p50 = percentile([(r - s) / 1e6 for _, s, r, _ in got], 50)
        print(f"link conditions on namespaced hosts (h1 -> h2), {PPS} packets/s; with none: p50 "
              f"{base_p50 * 1e3:.1f} us, {len(got)}/{n} received, {base_cpu * 1e6:.2f} us system CPU/packet")
        from netspec.links import offer

        if not offer().netem:
            result["absent"]["netem"] = "this kernel has no sch_netem"
        print(f"  netem: {result['absent'].get('netem', 'present')}")
        only = set(args.only.split(","))
        if "delay" in only:
            delays(link, prefix, n, result)
        if "loss" in only:
            losses(link, prefix, base_cpu, result)
        if "rate" in only:
            rates(link, prefix, args.seconds, result)
        if "partition" in only:
            partitions(link, prefix, args.seconds, result)
        if "tcp" in only:
            tcp(link, prefix, args.seconds, result)
    finally:
        nethosts.down(prefix)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_send":
        role_send(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) > 1 and sys.argv[1] == "_recv":
        role_recv(int(sys.argv[2]))
    elif len(sys.argv) > 1 and sys.argv[1] == "_apply":
        role_apply(*sys.argv[2:7])
    else:
        sys.exit(main())
