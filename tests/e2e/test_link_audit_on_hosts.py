"""The link audit on real namespaced hosts: a run with a delay and a loss from a to b, during
which this test measures the link itself (datagrams it stamps at both ends: the hosts'
namespaces share one clock), and the audit's links.parquet, its section in `ns_control report`
and its panel in report.html, against that truth of the same window."""

import json
import subprocess
import sys
import textwrap

import duckdb
from browser import chromium, console_errors, open_page
from netspec.analysis.links import COLUMNS, merged_lines, wilson
from support import PROGRAMS, start_run, wait_for

# In b's namespace: stamp each datagram's arrival with the kernel's receive stamp until told
# "E", then print [[seq, sent_ns, recv_ns], ...].
RECEIVER = """
import json, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", int(sys.argv[1])))
s.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS
print("ready", flush=True)
got = []
while True:
    d, anc, _, _ = s.recvmsg(64, 64)
    if d == b"E": break
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


def _in(host, *argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", host.netns, *argv], capture_output=True, text=True,
                          timeout=60, check=True, **kw)


def test_the_link_audit_agrees_with_what_the_link_delivered_in_the_same_window(ssh_env, experiment, tmp_path):
    a, b = ssh_env[0], ssh_env[1]
    (tmp_path / "receiver.py").write_text(RECEIVER)
    (tmp_path / "sender.py").write_text(SENDER)
    hold = tmp_path / "hold"
    hold.mkdir()
    path = experiment(textwrap.dedent(f"""\
        experiment: audit
        hosts: {{a: {{ssh: {a.alias}}}, b: {{ssh: {b.alias}}}}}
        components:
          w: {{host: a, program: {PROGRAMS / "waiter.py"}, args: [measure], params: {{dir: {hold}}}}}
        links:
          - {{from: a, to: b, delay: 10ms, loss: 5%}}
        schedule: [launch, sync_clocks, measure, collect]
        """))
    port = 47_000 + a.index
    proc, _ = start_run(path, tmp_path, lambda r: (hold / "measure.in").exists() and r,
                        "the run to hold in phase 'measure'")
    try:
        receiver = subprocess.Popen(["ip", "netns", "exec", b.netns, sys.executable,
                                     str(tmp_path / "receiver.py"), str(port)],
                                    stdout=subprocess.PIPE, text=True)
        assert receiver.stdout is not None and receiver.stdout.readline().strip() == "ready"
        _in(a, sys.executable, str(tmp_path / "sender.py"), b.address, str(port), str(SENT), str(GAP_S))
        # The end marker goes past the conditions' loss: sent until the receiver has ended.
        wait_for(lambda: _in(a, sys.executable, "-c", "import socket,sys; socket.socket(socket.AF_INET, "
                             f"socket.SOCK_DGRAM).sendto(b'E', ('{b.address}', {port}))") and
                 receiver.poll() is not None, timeout=10, what="the receiver's end")
        truth = json.loads(receiver.stdout.read())
    finally:
        (hold / "measure.go").touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err

    # The truth: this window's one-way delays and losses on the same link.
    delays = sorted((recv - sent) / 1e6 for _, sent, recv in truth)
    true_p50 = delays[len(delays) // 2]
    true_lo, true_hi = wilson(SENT - len(truth), SENT)
    assert 9.5 < true_p50 < 20, true_p50  # the link did delay (on a busy machine, late by a few ms)

    merged = tmp_path / "runs" / "latest" / "merged"
    db = duckdb.connect()
    table = db.execute(f"SELECT * FROM read_parquet('{merged / 'links.parquet'}')")
    assert [d[0] for d in table.description] == COLUMNS.names
    rows = {(r[0], r[1], r[3]): dict(zip(COLUMNS.names, r, strict=True)) for r in table.fetchall()}
    audit = rows[("a", "b", "measure")]
    assert audit["configured_delay_ms"] == 10.0 and audit["configured_loss_pct"] == 5.0
    assert audit["probes_sent"] >= 30 and audit["probe_share_pct"] is None  # no rate: 50 a second
    # The audit's median one-way delay is the link's: within the two medians' spread on this
    # machine (a millisecond) and the clock bounds of both ends.
    assert abs(audit["delay_p50_ms"] - true_p50) <= 1.0 + audit["delay_bound_ms"], (audit, true_p50)
    # Its loss interval and the truth's overlap: the two estimate one rate.
    assert audit["loss_low_pct"] <= 100 * true_hi and 100 * true_lo <= audit["loss_high_pct"], (audit, truth)
    # The delay went through netspec's user-space path (no netem here): its counters are said.
    assert audit["user_late_pct"] is not None and audit["user_drops"] is not None, audit
    assert audit["user_cpu_pct"] is not None and audit["bottleneck"] is not None, audit

    # The section the run's own summary printed, and `ns_control report`'s (one function's lines).
    for said in (out.splitlines(), merged_lines(merged)):
        assert any("Links (configured against achieved, from the audit's probes):" in x for x in said), said
        line = next(x for x in said if x.strip().startswith("a -> b") and " measure " in x)
        assert f"{audit['delay_p50_ms']:.3f}" in line and audit["verdict"] in line
    # report.html's Links panel, drawn by a real Chromium from the data the page carries.
    with chromium() as driver:
        open_page(driver, (merged / "report.html").as_uri())
        table = driver.find_element("id", "links-table").text
        assert "a -> b" in table and audit["verdict"] in table, table
        assert driver.find_elements("css selector", "#links .main-svg"), "the panel drew no plot"
        assert console_errors(driver) == []
