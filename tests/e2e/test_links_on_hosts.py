"""Link conditions on real namespaced hosts, in one run: applied at launch and changed at a
step's release, measured by this test against what the machine delivered in the same window
(UDP round trips it times, a burst's arrivals it stamps, datagrams stamped at both ends whose
one-way delays it reads (the hosts' namespaces share one clock), the kernel's own drop
counters); the link audit's links.parquet, its section in the merge's and `ns_control
report`'s lines and its panel in report.html against that truth; `show`'s and the live
output's link changes; and the conditions removed from every host after the controller is
killed (SIGKILL) and `ns_control collect` ran (whose merge makes the audit)."""

import json
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import duckdb
import msgspec
import pytest
from browser import chromium, console_errors, open_page
from netspec.analysis.links import COLUMNS, merged_lines, wilson
from netspec.links.names import table
from netspec.links.probes import DEFAULT_PER_S
from netspec.protocol.links import LinkCondition
from support import PROGRAMS, load_record, ns_control, remove_named, session_dir, start_run, wait_for

# A UDP echo in host b's namespace: "P<n>" is sent back; "B..." (a burst) is stamped on arrival;
# "S" is answered with the burst's arrivals [[ns, bytes], ...]. The "S" is sent from b itself,
# over its loopback: it never crosses the lossy link, so a lost marker cannot fail the test.
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
# seconds after the last: lost), or a burst of `burst` 1200-byte datagrams sent back to back;
# run in b's with neither (to 127.0.0.1): what b stamped of the burst.
PROBE = """
import json, select, socket, sys, time
host, port, pings, burst = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tail = float(sys.argv[5])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if burst:
    for i in range(burst):
        s.sendto(b"B" + bytes(1199), (host, port))
    time.sleep(0.7)  # the last of them through the delay and the rate's queue (10 Mbit/s: 0.4 s)
    sys.exit()
if not pings:
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

# In b's namespace: stamp each datagram's arrival with the kernel's receive stamp until told
# "E" (from b itself, over its loopback: the marker never crosses the lossy link) and 200 ms
# (ten times the link's delay) pass without one, then print [[seq, sent_ns, recv_ns], ...].
RECEIVER = """
import json, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", int(sys.argv[1])))
s.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS
print("ready", flush=True)
got = []
while True:
    try:
        d, anc, _, _ = s.recvmsg(64, 64)
    except TimeoutError:
        break
    if d == b"E":
        s.settimeout(0.2); continue
    sec, nsec = struct.unpack("=qq", anc[0][2][:16])
    got.append((*struct.unpack("!qq", d), sec * 10**9 + nsec))
print(json.dumps(got))
"""
# In a's namespace: `count` datagrams `gap_s` apart, each its number and its send stamp.
SENDER = """
import socket, struct, sys, time
host, port, count, gap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
start = time.monotonic()
for i in range(count):
    while time.monotonic() < start + i * gap: time.sleep(0.0005)
    s.sendto(struct.pack("!qq", i, time.time_ns()), (host, port))
"""
SENT = 300
GAP_S = 0.004


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


def _truth(a, b, tmp_path) -> list:
    """SENT datagrams GAP_S apart from a to b over the link, as b received them."""
    port = 47_000 + a.index
    receiver = subprocess.Popen(["ip", "netns", "exec", b.netns, sys.executable,
                                 str(tmp_path / "receiver.py"), str(port)], stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None and receiver.stdout.readline().strip() == "ready"
        _in(a, sys.executable, str(tmp_path / "sender.py"), b.address, str(port), str(SENT), str(GAP_S))
        _in(b, sys.executable, "-c", "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
            f".sendto(b'E', ('127.0.0.1', {port}))")  # the end marker, over b's loopback
        out, _ = receiver.communicate(timeout=30)
        return json.loads(out)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()


def test_links_are_applied_changed_audited_shown_and_gone_after_the_controller_is_killed(
        ssh_env, experiment, tmp_path):
    a, b = ssh_env[0], ssh_env[1]
    port = random.randrange(20000, 60000)
    programs = {"echo.py": ECHO, "probe.py": PROBE, "receiver.py": RECEIVER, "sender.py": SENDER}
    for name, text in programs.items():
        (tmp_path / name).write_text(text)
    echo = subprocess.Popen(["ip", "netns", "exec", b.netns, sys.executable, str(tmp_path / "echo.py"),
                             str(port)])
    hold = tmp_path / "hold"
    hold.mkdir()
    path = experiment(textwrap.dedent(f"""\
        experiment: links
        hosts: {{a: {{ssh: {a.alias}}}, b: {{ssh: {b.alias}}}}}
        components:
          w: {{host: a, program: {PROGRAMS / "waiter.py"}, args: ["measure,burst,cut"],
              params: {{dir: {hold}}}}}
          v: {{host: b, program: ACTOR, args: [measure]}}
        links:
          - {{from: a, to: b, delay: 20ms, loss: 10%, rate: 10mbit}}
        schedule:
          - launch
          - sync_clocks
          - measure
          - burst
          - {{phase: cut, links: [{{between: [a, b], partition: true}}]}}
          - collect
        """))

    def probe(pings: int = 0, burst: int = 0, tail: float = 0.8):  # a reply late on a busy machine
        out = _in(a, sys.executable, str(tmp_path / "probe.py"), b.address, str(port), str(pings),
                  str(burst), str(tail))
        if pings:
            return json.loads(out)
        # the burst's arrivals, asked at b over its loopback (not through the link's loss)
        return json.loads(_in(b, sys.executable, str(tmp_path / "probe.py"), "127.0.0.1", str(port),
                              "0", "0", "0"))
    proc = None
    try:
        proc, record = start_run(path, tmp_path, lambda r: (hold / "measure.in").exists() and r,
                                 "the run to hold in phase 'measure'")
        run_id = record["id"]
        truth = _truth(a, b, tmp_path)  # the audit's truth: this phase's one-way delays and losses
        pinged = probe(pings=100)
        lost = pinged["sent"] - len(pinged["rtt_ms"])
        assert 1 <= lost <= 30, pinged  # 10 % of 100
        p50 = pinged["rtt_ms"][len(pinged["rtt_ms"]) // 2]
        assert 20.0 <= p50 < 30.0, pinged  # 20 ms one way (a -> b), nothing back

        # The rate in a phase of its own: the burst's queue does not delay the audit's probes
        # of 'measure'.
        (hold / "measure.go").touch()
        wait_for(lambda: (hold / "burst.in").exists(), what="the run to hold in phase 'burst'")
        arrivals = probe(burst=400)
        # The rate at b, counted as htb counts it (each datagram's IP and Ethernet headers too).
        wire = sum(size + 42 for _, size in arrivals[1:]) * 8
        mbit = wire / ((arrivals[-1][0] - arrivals[0][0]) / 1e9) / 1e6
        assert 9.0 < mbit < 11.0, (mbit, len(arrivals))

        (hold / "burst.go").touch()
        wait_for(lambda: (hold / "cut.in").exists(), what="the run to hold in phase 'cut'")
        before, since = _drops(a, run_id), time.monotonic()
        cut = probe(pings=20, tail=0.1)  # dropped as they leave: the counter says so at once
        assert cut["rtt_ms"] == []
        assert _beside_probes(_drops(a, run_id) - before, 20, time.monotonic() - since)
        assert "drop" in _in(b, "nft", "list", "table", "netdev", table(run_id))  # b -> a cut too

        record = load_record(tmp_path / "runs" / "latest")
        launch, cutting = record["steps"][0], record["steps"][4]
        assert record["hosts"]["a"]["links"]["placements"]["b"]["parts"] == {
            "delay": "user", "loss": "user", "rate": "htb", "partition": "nftables"}
        assert launch["links"]["a"]["pairs"] == ["a->b"] and "b" not in launch["links"]
        assert launch["links"]["a"]["applied_ns"] < launch["hosts"]["a"]["components"]["w"]["entered_ns"]
        for host in ("a", "b"):  # after sync_clocks: on the global timeline, with a bound
            change = cutting["links"][host]
            assert change["at_ns"] is not None and change["bound_ns"] >= 0
            # its instant the middle of the window it took effect in, the bound covering the window
            width = change["applied_ns"] - change["began_ns"]
            assert width >= 0 and change["bound_ns"] >= width / 2, change
        state = record["plan"]["schedule"][4]["link_state"]
        assert {pair: msgspec.convert(c, LinkCondition) for pair, c in state.items()} == {
            "a->b": LinkCondition(partition=True), "b->a": LinkCondition(partition=True)}

        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.stdout is not None
        live = proc.stdout.read()
        collected = ns_control("collect", cwd=tmp_path)
        assert collected.returncode == 0, collected.stdout + collected.stderr
        assert _left(a) == [] and _left(b) == []
    finally:
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        echo.kill()
        echo.wait()

    # The live output and `show` say each step's link changes, when each took effect with its
    # bound, and each host's backends.
    assert "link conditions changed: a (1 direction(s), in effect within a " in live, live
    shown = ns_control("show", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    said = shown.stdout.splitlines()
    assert "  host a: offers htb, tbf, nftables, iptables, nfqueue" in said, said
    assert "    a -> b: delay by user, loss by user, rate by htb, partition by nftables" in said, said
    assert "    a -> b: delay 20 ms, loss 10 %, rate 10 Mbit/s" in said, said
    cutting_said = "  step 4 (cut): host a changed 1 direction(s), in effect within"
    changed = [x for x in said if x.startswith(cutting_said)]
    assert changed and " UTC ± " in changed[0], said
    assert "    a -> b: partition" in said and "    b -> a: partition" in said, said

    # The audit against the truth of the same window.
    delays = sorted((recv - sent) / 1e6 for _, sent, recv in truth)
    true_p50 = delays[len(delays) // 2]
    true_lo, true_hi = wilson(SENT - len(truth), SENT)
    assert 19.5 < true_p50 < 30, true_p50  # the link did delay (on a busy machine, late by a few ms)
    merged = tmp_path / "runs" / "latest" / "merged"
    db = duckdb.connect()
    parquet = db.execute(f"SELECT * FROM read_parquet('{merged / 'links.parquet'}')")
    assert [d[0] for d in parquet.description] == COLUMNS.names
    rows = {(r[0], r[1], r[3]): dict(zip(COLUMNS.names, r, strict=True)) for r in parquet.fetchall()}
    audit = rows[("a", "b", "measure")]
    # The launch's change's instant on the audit's row as run.json has it ('cut' has no row: the
    # controller was killed in it); 'measure' changed nothing.
    assert (rows[("a", "b", "launch")]["changed_at"], rows[("a", "b", "launch")]["changed_bound_ns"]) == (
        launch["links"]["a"]["at_ns"], launch["links"]["a"]["bound_ns"])
    assert audit["changed_at"] is None and audit["changed_bound_ns"] is None
    assert audit["configured_delay_ms"] == 20.0 and audit["configured_loss_pct"] == 10.0
    assert audit["configured_rate_mbit"] == 10.0
    assert audit["probes_sent"] >= 30 and audit["probe_share_pct"] <= 1.0  # at most 1 % of 10 Mbit/s
    # The audit's median one-way delay is the link's: within the two medians' spread on this
    # machine (a millisecond) and the clock bounds of both ends.
    assert abs(audit["delay_p50_ms"] - true_p50) <= 1.0 + audit["delay_bound_ms"], (audit, true_p50)
    # Its loss interval and the truth's overlap: the two estimate one rate.
    assert audit["loss_low_pct"] <= 100 * true_hi and 100 * true_lo <= audit["loss_high_pct"], (audit, truth)
    # The delay and the loss went through netspec's user-space path (no netem here): its
    # counters are said, and every ping lost is one it dropped (the audit's probes and the
    # truth's datagrams beside them).
    assert audit["user_late_pct"] is not None and audit["user_drops"] is not None, audit
    assert audit["user_drops"] >= lost, (audit, pinged)
    assert audit["user_cpu_pct"] is not None and audit["bottleneck"] is not None, audit

    # The section the merge printed (collect's), and `ns_control report`'s (one function's lines).
    for lines in (collected.stdout.splitlines(), merged_lines(merged)):
        assert any("Links (configured against achieved, from the audit's probes):" in x for x in lines), lines
        line = next(x for x in lines if x.split()[:4] == ["a", "->", "b", "measure"])  # not a verdict's word
        assert f"{audit['delay_p50_ms']:.3f}" in line and audit["verdict"] in line
    # report.html's Links panel, drawn by a real Chromium from the data the page carries.
    with chromium() as driver:
        open_page(driver, (merged / "report.html").as_uri())
        panel = driver.find_element("id", "links-table").text
        assert "a -> b" in panel and audit["verdict"] in panel, panel
        assert driver.find_elements("css selector", "#links .main-svg"), "the panel drew no plot"
        assert console_errors(driver) == []


def test_the_audits_tcp_probes_find_a_delayed_link_as_tcp_finds_a_real_one(ssh_env, experiment, tmp_path):
    # 10 ms each way, no rate: a TCP probe every 2 s on average each way over 8 s; each is
    # judged against a connect of the same instant (analysis/linktcp.py).
    a, b = ssh_env[0], ssh_env[1]
    path = experiment(textwrap.dedent(f"""\
        experiment: links-tcp
        hosts: {{a: {{ssh: {a.alias}}}, b: {{ssh: {b.alias}}}}}
        components:
          wait: {{host: a, command: [sleep, "8"], start: hold}}
        links:
          - {{between: [a, b], delay: 10ms}}
        schedule:
          - launch
          - sync_clocks
          - hold
          - collect
        """))
    done = ns_control("run", str(path), cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    merged = tmp_path / "runs" / "latest" / "merged"
    db = duckdb.connect()
    rows = db.execute(f"""SELECT src, dst, tcp_probes, tcp_failed, tcp_connect_ms, tcp_request_ms,
                                 tcp_burst_ms, tcp_burst_expected_ms, verdict
                          FROM read_parquet('{merged / 'links.parquet'}') WHERE phase = 'hold'""").fetchall()
    assert {(r[0], r[1]) for r in rows} == {("a", "b"), ("b", "a")}, rows
    probed = [r for r in rows if r[2]]
    assert probed, rows  # at least one way probed (each: 4 expected)
    for src, dst, probes, failed, connect, request, burst, expected, verdict in probed:
        assert failed == 0, (src, dst, probes, failed)
        # A round trip is 20 ms; the request cost one too, the burst slow start's three.
        assert 19.5 < connect < 30 and abs(request - connect) <= 0.25 * connect + 0.5, (connect, request)
        assert expected == 3 * connect and burst <= 1.5 * expected + 1.0, (burst, expected)
        assert "changes TCP" not in verdict, verdict


def test_tcp_across_a_delayed_link_between_containers_is_as_across_a_real_one(
        docker_image, experiment, tmp_path):
    # Two containers made for the run (the user-space path in each: this kernel has no netem),
    # 10 ms each way; the audit's TCP probes, a connect against a request in two writes and a
    # burst, in the same instant (analysis/linktcp.py), and the delay as its datagrams found it.
    docker = pytest.importorskip("docker")

    prefix = f"{session_dir().name}-tcp"
    path = experiment(textwrap.dedent(f"""\
        experiment: links-tcp-docker
        hosts:
          a: {{docker: {{image: "{docker_image}", prefix: {prefix}}}}}
          b: {{docker: {{image: "{docker_image}", prefix: {prefix}}}}}
        components:
          wait: {{host: a, command: [sleep, "8"], start: hold}}
        links:
          - {{between: [a, b], delay: 10ms}}
        schedule: [launch, sync_clocks, hold, collect]
        """))
    client = docker.from_env()
    try:
        done = ns_control("run", str(path), cwd=tmp_path, timeout=240)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        remove_named(client, prefix)
    merged = tmp_path / "runs" / "latest" / "merged"
    rows = duckdb.connect().execute(f"""SELECT src, dst, backend, delay_p50_ms, tcp_probes, tcp_failed,
                                               tcp_connect_ms, tcp_request_ms, tcp_burst_ms,
                                               tcp_burst_expected_ms, verdict
                                        FROM read_parquet('{merged / 'links.parquet'}')
                                        WHERE phase = 'hold'""").fetchall()
    assert {(r[0], r[1], r[2]) for r in rows} == {("a", "b", "user"), ("b", "a", "user")}, rows
    assert all(9.5 < r[3] < 12 for r in rows), rows
    probed = [r for r in rows if r[4]]
    assert probed, rows
    for *_, failed, connect, request, burst, expected, verdict in probed:
        assert failed == 0 and 19.5 < connect < 30, probed
        assert abs(request - connect) <= 0.25 * connect + 0.5 and burst <= 1.5 * expected + 1.0, probed
        assert "changes TCP" not in verdict, verdict
