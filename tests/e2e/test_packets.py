"""End to end: the `packets:` service on two namespaced SSH hosts, real UDP and TCP traffic
between them captured by tcpdump on each host's veth, matched end to end in the merge, and
checked against the truth of the same window: the namespaces share one kernel clock, so a
packet's one-way delay on the global timeline must equal the difference of its two raw
kernel stamps within its bound; every datagram the sender says it sent is matched; netspec's
own traffic (SSH, clksync) is not captured."""

import html
import re
import shutil

import duckdb
import pytest
from browser import chromium, console_errors, open_page, run_ref, serving
from netspec.analysis.packets import read_pcap
from netspec.protocol.packets import PACKETS_DIR, read_records
from netspec.protocol.runrecord import read_run
from selenium.webdriver.common.by import By
from support import ns_control, session_dir

NO_TCPDUMP = "the packets: service captures with tcpdump (apt-get install tcpdump)"
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("tcpdump") is None, reason=NO_TCPDUMP)]

UDP_SEND = ("import socket, sys, time\\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\\n"
            "for n in range(1500):\\n"
            "    s.sendto(n.to_bytes(4, 'big') * 16, (sys.argv[1], 9500)); time.sleep(0.0005)\\n"
            "print(1500)")
UDP_RECV = ("import socket\\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\\n"
            "s.bind(('0.0.0.0', 9500)); s.settimeout(30.0)\\nn = 0\\nwhile True:\\n"
            "    try: s.recv(128); n += 1\\n    except TimeoutError: break\\nprint(n)")
TCP_SERVE = ("import socket\\nl = socket.create_server(('0.0.0.0', 9501))\\nl.settimeout(30)\\n"
             "c, _ = l.accept()\\nwhile (d := c.recv(65536)): c.sendall(d[:16])")
TCP_CLIENT = ("import socket, sys, time\\ntime.sleep(0.3)\\n"
              "c = socket.create_connection((sys.argv[1], 9501))\\n"
              "for n in range(200):\\n    c.sendall(b'x' * 300); c.recv(64); time.sleep(0.002)\\nc.close()")


def test_packets_are_captured_on_each_host_and_matched_end_to_end_on_the_timeline(ssh_env, tmp_path):
    a, b = ssh_env[0], ssh_env[1]
    path = tmp_path / "packets.yaml"
    path.write_text(f"""\
experiment: packets
hosts:
  a: {{ssh: {a.alias}, accept_new_host_key: true}}
  b: {{ssh: {b.alias}, accept_new_host_key: true}}
services: {{packets: {{}}}}
components:
  udp_recv: {{host: b, command: [python3, -c, "{UDP_RECV}"], start: start_logging, stop: stop_logging}}
  tcp_serve: {{host: b, command: [python3, -c, "{TCP_SERVE}"], start: start_logging, stop: stop_logging}}
  udp_send: {{host: a, command: [python3, -c, "{UDP_SEND}", {b.address}], start: work}}
  tcp_client: {{host: a, command: [python3, -c, "{TCP_CLIENT}", {b.address}], start: work}}
schedule: [launch, sync_clocks, start_logging, work, stop_logging, collect]
""")
    run = ns_control("run", str(path), cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    rundir = tmp_path / "runs" / "latest"
    assert read_run(rundir).status == "ok"
    # each host's capture ran, dropped nothing, and is a nanosecond pcap Wireshark reads
    for host in ("a", "b"):
        directory = rundir / "hosts" / host / "streams" / PACKETS_DIR
        [record] = [r for r in read_records(directory) if r.addresses]
        assert not record.error and record.dropped == 0 and record.captured > 1500, record
        assert (directory / record.file).read_bytes()[:4] == bytes.fromhex("4d3cb2a1")
    packets = str(rundir / "merged" / "packets.parquet")
    udp = duckdb.sql(f"SELECT count(*), count(*) FILTER (WHERE matched) FROM '{packets}' "
                     "WHERE proto = 'udp' AND flow LIKE '%:9500'").fetchall()[0]
    assert udp == (1500, 1500), udp  # every datagram the sender sent, matched at b
    tcp = duckdb.sql(f"SELECT src_host, count(*), count(*) FILTER (WHERE matched) FROM '{packets}' "
                     "WHERE proto = 'tcp' AND flow LIKE '%9501%' GROUP BY src_host ORDER BY src_host"
                     ).fetchall()
    assert [h for h, *_ in tcp] == ["a", "b"] and all(m == n and n >= 200 for _, n, m in tcp), tcp
    # netspec's own: SSH's and clksync's packets are not among them
    own = duckdb.sql(f"SELECT count(*) FROM '{packets}' "
                     "WHERE flow LIKE '%:22 %' OR flow LIKE '%:22'").fetchall()
    assert own[0][0] == 0
    # the truth, one kernel clock for both namespaces: each datagram's raw stamps at a and b
    raw = {}
    for host in ("a", "b"):
        directory = rundir / "hosts" / host / "streams" / PACKETS_DIR
        for record in read_records(directory):
            for p in read_pcap(directory / record.file):
                if p.proto == 17 and p.dport == 9500:
                    raw.setdefault(p.head[:4], {})[host] = p.ts  # the datagram's number
    rows = duckdb.sql(f"SELECT sent_ts, one_way_ns, bound_ns FROM '{packets}' "
                      "WHERE proto = 'udp' AND flow LIKE '%:9500' AND matched ORDER BY sent_ts").fetchall()
    truth = sorted(stamps["b"] - stamps["a"] for stamps in raw.values())
    assert len(truth) == len(rows) == 1500
    by_send = [stamps["b"] - stamps["a"] for stamps in sorted(raw.values(), key=lambda s: s["a"])]
    off = [abs(one_way - true) - bound for (_, one_way, bound), true in zip(rows, by_send, strict=True)]
    assert max(off) <= 0, max(off)
    one_way = sorted(r[1] for r in rows)
    assert 0 < one_way[len(one_way) // 2] < 1_000_000, one_way[len(one_way) // 2]  # a bare veth: microseconds
    assert "packets (each sent packet matched with its receipt" in run.stdout
    # the browser's packets panel: a trace per direction and the table of what each saw
    with serving(tmp_path) as url, chromium() as driver:
        open_page(driver, f"{url}/run/{run_ref(tmp_path, 'packets')}")
        names = driver.execute_script("return document.getElementById('packets').data.map(t => t.name)")
        # plotly draws a trace's name as HTML: the panel's text comes escaped
        assert sorted(html.unescape(n).split(" (")[0] for n in names) == ["a -> b", "b -> a"], names
        rows = [[td.text for td in row.find_elements(By.TAG_NAME, "td")]
                for row in driver.find_elements(By.CSS_SELECTOR, "#packets-table tbody tr")]
        assert rows[0][:2] == ["a -> b", "work"] and rows[0][2] == rows[0][3], rows  # all matched
        assert console_errors(driver) == []


DELAY_MS = 5.0


def test_a_links_emulated_delay_counts_as_network_time(ssh_env, tmp_path):
    """The user-space path holds each packet for the delay and sends its copy then, past the
    interface's capture: the instant the packet met the link (the path's own record) is its
    send, so the kernel-level one-way delay is the link's, as the issue bounds it."""
    a, b = ssh_env[0], ssh_env[1]
    path = tmp_path / "delayed.yaml"
    path.write_text(f"""\
experiment: packets-delayed
hosts:
  a: {{ssh: {a.alias}, accept_new_host_key: true}}
  b: {{ssh: {b.alias}, accept_new_host_key: true}}
links:
  - {{between: [a, b], delay: {DELAY_MS:g}ms}}
services: {{packets: {{ports: [9500]}}}}
components:
  udp_recv: {{host: b, command: [python3, -c, "{UDP_RECV}"], start: start_logging, stop: stop_logging}}
  udp_send: {{host: a, command: [python3, -c, "{UDP_SEND}", {b.address}], start: work}}
schedule: [launch, sync_clocks, start_logging, work, stop_logging, collect]
""")
    run = ns_control("run", str(path), cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    packets = str(tmp_path / "runs" / "latest" / "merged" / "packets.parquet")
    query = (f"SELECT count(*), count(*) FILTER (WHERE matched), median(one_way_ns) FROM '{packets}' "
             "WHERE src_host = 'a'")
    count, matched, p50 = duckdb.sql(query).fetchall()[0]
    assert (count, matched) == (1500, 1500)
    # The truth of the same window: how long the path held each datagram, from a's two raw
    # records of it (as it met the link, and its copy leaving a's interface), one clock.
    directory = tmp_path / "runs" / "latest" / "hosts" / "a" / "streams" / "packets"
    [held] = directory.glob("*.held.pcap")  # the path's record of each packet it held
    [left] = directory.glob("*.eth*.pcap")
    met = {p.head[:4]: p.ts for p in read_pcap(held) if p.dport == 9500}
    holds = sorted(p.ts - met[p.head[:4]] for p in read_pcap(left) if p.dport == 9500 and p.head[:4] in met)
    assert len(holds) == 1500 and holds[0] >= DELAY_MS * 1e6 - 50_000, holds[:3]  # never early
    # the network's share is the link's: the delay held, as the machine delivered it (without the
    # path's record, the one-way delay would be the copy's, microseconds)
    assert abs(p50 - holds[len(holds) // 2]) <= max(0.05 * DELAY_MS * 1e6, 250_000), (p50, holds[750])
    assert p50 >= DELAY_MS * 1e6


RECV_PROGRAM = """\
import socket, threading
from netspec import nodelib
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
@nodelib.phase()
def listen(ctx):
    s.bind((ctx.host_address, 9500)); ctx.publish(address=ctx.host_address)
    threading.Thread(target=lambda: [s.recv(100) for _ in iter(int, 1)], daemon=True).start()
nodelib.run()
"""
SEND_PROGRAM = """\
import socket, time
from netspec import nodelib
@nodelib.phase()
def work(ctx):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for n in range(1000):
        s.sendto(n.to_bytes(4, "big") * 8, (ctx.lookup("recv", "address"), 9500)); time.sleep(0.001)
nodelib.run()
"""


def test_containers_capture_their_packets_and_the_merge_matches_them(docker_image, tmp_path):
    prefix = f"{session_dir().name}-pk"
    (tmp_path / "recv.py").write_text(RECV_PROGRAM)
    (tmp_path / "send.py").write_text(SEND_PROGRAM)
    (tmp_path / "d.yaml").write_text(f"""\
experiment: packets-docker
hosts:
  a: {{docker: {{image: "{docker_image}", prefix: {prefix}}}}}
  b: {{docker: {{image: "{docker_image}", prefix: {prefix}}}}}
services: {{packets: {{}}}}
components:
  recv: {{host: b, program: recv.py}}
  send: {{host: a, program: send.py}}
schedule: [launch, sync_clocks, start_logging, listen, work, stop_logging, collect]
""")
    run = ns_control("run", "d.yaml", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    counted = r"a/netspecd: packets: eth0: \d+ captured, 0 dropped by the kernel"
    assert re.search(counted, run.stdout), run.stdout
    packets = str(tmp_path / "runs" / "latest" / "merged" / "packets.parquet")
    said = duckdb.sql(f"SELECT count(*), count(*) FILTER (WHERE matched), median(one_way_ns) "
                      f"FROM '{packets}' WHERE src_host = 'a' AND flow LIKE '%:9500'").fetchall()[0]
    assert said[:2] == (1000, 1000) and 0 < said[2] < 1_000_000, said  # one bridge: microseconds
