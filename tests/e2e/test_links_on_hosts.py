"""Link conditions on real namespaced hosts: applied at launch and changed at a step's release,
measured by this test against what the machine delivered in the same window (UDP round trips
it times, a burst's arrivals it stamps, the kernel's own drop counters), and removed from
every host after the controller is killed (SIGKILL) and `ns_control collect` ran."""

import json
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import msgspec
from netspec.links.names import table
from netspec.links.probes import DEFAULT_PER_S
from netspec.protocol.links import LinkCondition
from support import PROGRAMS, load_record, ns_control, start_run, wait_for

# A UDP echo in host b's namespace: "P<n>" is sent back; "B..." (a burst) is stamped on arrival;
# "S" is answered with the burst's arrivals [[ns, bytes], ...].
ECHO = """
import json, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", int(sys.argv[1])))
burst = []
while True:
    d, a = s.recvfrom(65536)
    if d[:1] == b"B": burst.append((time.monotonic_ns(), len(d)))
    elif d[:1] == b"S": s.sendto(json.dumps(burst).encode(), a); burst = []
    else: s.sendto(d, a)
"""
# Run in host a's namespace: `pings` datagrams 5 ms apart (their round trips, ms; none in `tail`
# seconds after the last: lost), or a burst of `burst` 1200-byte datagrams sent back to back
# (what b stamped of them).
PROBE = """
import json, select, socket, sys, time
host, port, pings, burst = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tail = float(sys.argv[5])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if burst:
    for i in range(burst):
        s.sendto(b"B" + bytes(1199), (host, port))
    time.sleep(0.7)  # the last of them through the delay and the rate's queue (10 Mbit/s: 0.4 s)
    s.sendto(b"S", (host, port)); s.settimeout(2.0)
    print(s.recv(65536).decode()); sys.exit()
sent, rtt, start = {}, {}, time.monotonic()
while time.monotonic() < start + pings * 0.005 + tail:
    i = len(sent)
    if i < pings and time.monotonic() >= start + i * 0.005:
        sent[i] = time.monotonic(); s.sendto(b"P" + i.to_bytes(4, "big"), (host, port))
    if select.select([s], [], [], 0.001)[0]:
        n = int.from_bytes(s.recv(64)[1:5], "big"); rtt[n] = (time.monotonic() - sent[n]) * 1e3
print(json.dumps({"sent": pings, "rtt_ms": sorted(rtt.values())}))
"""


def _in(host, *argv: str) -> str:
    return subprocess.run(["ip", "netns", "exec", host.netns, *argv], capture_output=True, text=True,
                          timeout=30, check=True).stdout


def _beside_probes(dropped: int, lost: int, seconds: float) -> bool:
    """Whether the kernel's drops are the test's own losses and at most what the link audit's
    probes (links/probes.py: DEFAULT_PER_S a second on a link without a rate, shaped as all
    traffic of the link is) can have added in `seconds`."""
    return lost <= dropped <= lost + math.ceil(2 * DEFAULT_PER_S * seconds) + 2


def _drops(host, run_id: str) -> int:
    """Packets the run's nftables rules on `host` dropped: the kernel's own count."""
    listed = json.loads(_in(host, "nft", "-j", "list", "table", "netdev", table(run_id)))
    return sum(e["counter"]["packets"] for item in listed["nftables"] if "rule" in item
               for e in item["rule"]["expr"] if "counter" in e)


def _left(host) -> list[str]:
    """Whatever of netspec's link conditions is on `host`: tables, chains, qdiscs, queues."""
    found = [line for line in _in(host, "nft", "list", "tables").splitlines() if "netspec_" in line]
    found += [line for line in _in(host, "iptables", "-S").splitlines() if "NETSPEC_" in line]
    found += [line for line in _in(host, "tc", "qdisc", "show").splitlines() if " htb " in line]
    found += _in(host, "cat", "/proc/net/netfilter/nfnetlink_queue").splitlines()
    return found


def test_links_are_applied_changed_at_a_step_and_gone_after_the_controller_is_killed(
        ssh_env, experiment, tmp_path):
    a, b = ssh_env[0], ssh_env[1]
    port = random.randrange(20000, 60000)
    (tmp_path / "echo.py").write_text(ECHO)
    (tmp_path / "probe.py").write_text(PROBE)
    echo = subprocess.Popen(["ip", "netns", "exec", b.netns, sys.executable, str(tmp_path / "echo.py"),
                             str(port)])
    hold = tmp_path / "hold"
    hold.mkdir()
    path = experiment(textwrap.dedent(f"""\
        experiment: links
        hosts: {{a: {{ssh: {a.alias}}}, b: {{ssh: {b.alias}}}}}
        components:
          w: {{host: a, program: {PROGRAMS / "waiter.py"}, args: ["measure,cut"], params: {{dir: {hold}}}}}
          v: {{host: b, program: ACTOR, args: [measure]}}
        links:
          - {{from: a, to: b, delay: 20ms, loss: 10%, rate: 10mbit}}
        schedule:
          - launch
          - sync_clocks
          - measure
          - {{phase: cut, links: [{{between: [a, b], partition: true}}]}}
          - collect
        """))

    def probe(pings: int = 0, burst: int = 0, tail: float = 0.8):  # a reply late on a busy machine
        return json.loads(_in(a, sys.executable, str(tmp_path / "probe.py"), b.address, str(port),
                              str(pings), str(burst), str(tail)))
    proc = None
    try:
        proc, record = start_run(path, tmp_path, lambda r: (hold / "measure.in").exists() and r,
                                 "the run to hold in phase 'measure'")
        run_id = record["id"]
        before, since = _drops(a, run_id), time.monotonic()
        pinged = probe(pings=100)
        lost = pinged["sent"] - len(pinged["rtt_ms"])
        # every ping lost is one the kernel dropped (the audit's probes beside them)
        assert _beside_probes(_drops(a, run_id) - before, lost, time.monotonic() - since)
        assert 1 <= lost <= 30, pinged  # 10 % of 100
        p50 = pinged["rtt_ms"][len(pinged["rtt_ms"]) // 2]
        assert 20.0 <= p50 < 30.0, pinged  # 20 ms one way (a -> b), nothing back
        before, since = _drops(a, run_id), time.monotonic()
        arrivals = probe(burst=400)
        assert _beside_probes(_drops(a, run_id) - before, 400 - len(arrivals), time.monotonic() - since)
        # The rate at b, counted as htb counts it (each datagram's IP and Ethernet headers too).
        wire = sum(size + 42 for _, size in arrivals[1:]) * 8
        mbit = wire / ((arrivals[-1][0] - arrivals[0][0]) / 1e9) / 1e6
        assert 9.0 < mbit < 11.0, mbit

        (hold / "measure.go").touch()
        wait_for(lambda: (hold / "cut.in").exists(), what="the run to hold in phase 'cut'")
        before, since = _drops(a, run_id), time.monotonic()
        cut = probe(pings=20, tail=0.1)  # dropped as they leave: the counter says so at once
        assert cut["rtt_ms"] == []
        assert _beside_probes(_drops(a, run_id) - before, 20, time.monotonic() - since)
        assert "drop" in _in(b, "nft", "list", "table", "netdev", table(run_id))  # b -> a cut too

        record = load_record(tmp_path / "runs" / "latest")
        launch, cutting = record["steps"][0], record["steps"][3]
        assert record["hosts"]["a"]["links"]["placements"]["b"]["parts"] == {
            "delay": "user", "loss": "nftables", "rate": "htb", "partition": "nftables"}
        assert launch["links"]["a"]["pairs"] == ["a->b"] and "b" not in launch["links"]
        assert launch["links"]["a"]["applied_ns"] < launch["hosts"]["a"]["components"]["w"]["entered_ns"]
        for host in ("a", "b"):  # after sync_clocks: on the global timeline, with a bound
            assert cutting["links"][host]["at_ns"] is not None and cutting["links"][host]["bound_ns"] >= 0
        state = record["plan"]["schedule"][3]["link_state"]
        assert {pair: msgspec.convert(c, LinkCondition) for pair, c in state.items()} == {
            "a->b": LinkCondition(partition=True), "b->a": LinkCondition(partition=True)}

        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        collected = ns_control("collect", cwd=tmp_path)
        assert collected.returncode == 0, collected.stdout + collected.stderr
        assert _left(a) == [] and _left(b) == []
    finally:
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        echo.kill()
        echo.wait()
