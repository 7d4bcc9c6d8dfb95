"""The audit's probes: sent at random instants to each peer, received with the kernel's
stamp, both ends logged in the `links` stream; at most 1 % of a link's capacity; the
thread and socket gone after close."""

from __future__ import annotations

import itertools
import socket
import time
from pathlib import Path

import msgspec
from netspec.daemon.services import NodeServices
from netspec.datastream.reader import StreamReader
from netspec.datastream.schema import ProbeRecord, SentRecord, TcpProbeRecord
from netspec.links.probes import DEFAULT_PER_S, MAX_SHARE, WIRE_OVERHEAD, Target, probe_size, probes_per_s
from netspec.protocol.links import LinkStats
from support import descriptors, threads_named, wait_for


def _records(directory: Path, entity: str) -> list[list]:
    found = []
    for path in sorted(directory.glob("links.*.ds")):
        with StreamReader(path) as reader:
            found += [(r.ts, r.value) for r in reader if r.entity.full_name == entity]
    return found


def test_probes_take_at_most_one_percent_of_a_links_capacity() -> None:
    size = probe_size("h1")
    for rate in (100e3, 1e6, 10e6, 100e6):
        per_s = probes_per_s(rate, size)
        assert per_s * (size + WIRE_OVERHEAD) * 8 <= MAX_SHARE * rate + 1e-9
    assert probes_per_s(None, size) == DEFAULT_PER_S


def test_probes_between_two_hosts_are_logged_at_both_ends_and_leave_nothing_after(tmp_path: Path) -> None:
    before = descriptors()
    a = NodeServices("run-probes", "a", tmp_path / "a")
    b = NodeServices("run-probes", "b", tmp_path / "b")
    try:
        port_a = a.open_probes("127.0.0.1", default_per_s=400,
                               stats=lambda: LinkStats(read_ns=time.time_ns()))
        port_b = b.open_probes("127.0.0.1", default_per_s=400)
        a.start_probes([Target("b", "127.0.0.1")], port_b)
        b.start_probes([Target("a", "127.0.0.1")], port_a)
        assert len(threads_named("link-probes")) == 2 and len(threads_named("link-stats")) == 1
        wait_for(lambda: a.probes.received >= 20 and b.probes.received >= 20, timeout=10,
                 what="20 probes each way")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:  # not a probe of this run
            stranger.sendto(b"NSLP" + bytes(40), ("127.0.0.1", port_b))
        wait_for(lambda: b.probes.refused == 1, timeout=10, what="the stranger's datagram refused")
    finally:
        a.close()
        b.close()
    assert threads_named("link-probes") == threads_named("link-stats") == []
    assert _records(tmp_path / "a", "LINKS/stats")  # the backends' counters, read beside the probes
    (_, counts), = _records(tmp_path / "b", "LINKS/counts")  # said once, at the close
    assert counts["received"] == len(_records(tmp_path / "b", "LINKS/probe")) and counts["refused"] == 1
    assert descriptors() == before
    received = _records(tmp_path / "b", "LINKS/probe")
    sent = _records(tmp_path / "a", "LINKS/sent")
    probes = [msgspec.convert(v, ProbeRecord) for _, v in received]
    sends = {s.seq: s for s in (msgspec.convert(v, SentRecord) for _, v in sent)}
    assert len(probes) >= 20 and all(p.src == "a" and p.dst == "b" for p in probes)
    for (ts, _), p in zip(received, probes, strict=True):
        assert ts == p.recv_ns  # logged at the kernel's receive stamp
        assert sends[p.seq].sent_ns == p.sent_ns
        assert 0 < p.recv_ns - p.sent_ns < 50_000_000
    # A Poisson process: its gaps are not all alike (a periodic sender's would be).
    stamps = sorted(s.sent_ns for s in sends.values())
    gaps = sorted(later - earlier for earlier, later in itertools.pairwise(stamps))
    assert gaps[len(gaps) // 10] * 3 < gaps[len(gaps) * 9 // 10]


def test_tcp_probes_time_a_connect_a_request_in_two_writes_and_a_burst_and_leave_nothing_after(
        tmp_path: Path) -> None:
    before = descriptors()
    a = NodeServices("run-tcp-probes", "a", tmp_path / "a")
    b = NodeServices("run-tcp-probes", "b", tmp_path / "b")
    try:
        port_a = a.open_probes("127.0.0.1")
        port_b = b.open_probes("127.0.0.1")
        a.start_probes([Target("b", "127.0.0.1")], port_b)
        b.start_probes([], port_a)  # a host no link starts at takes probes all the same
        assert len(threads_named("link-tcp-serve")) == 2 and len(threads_named("link-tcp-probe")) == 2
        wait_for(lambda: a.probes.tcp.probed >= 3, timeout=40, what="three TCP probes a -> b (one every 2 s)")
        with socket.create_connection(("127.0.0.1", port_b)) as stranger:  # not this run's probe
            stranger.sendall(bytes(128))
            assert stranger.recv(64) == b""  # closed unanswered
        wait_for(lambda: b.probes.tcp.refused == 1, timeout=10, what="the stranger refused")
    finally:
        a.close()
        b.close()
    assert threads_named("link-tcp-serve") == threads_named("link-tcp-probe") == []
    assert threads_named("link-tcp-answer") == []
    assert descriptors() == before
    probes = [msgspec.convert(v, TcpProbeRecord) for _, v in _records(tmp_path / "a", "LINKS/tcp")]
    assert len(probes) >= 3 and all(p.dst == "b" and p.error is None for p in probes), probes
    for p in probes:  # each part timed, over loopback: well under a second
        assert 0 < p.connect_ns < 10**9 and 0 < p.request_ns < 10**9 and 0 < p.burst_ns < 10**9, p
        assert p.burst_bytes == 65_536
    (_, counts), = _records(tmp_path / "a", "LINKS/counts")
    assert counts["tcp_probed"] == len(probes) and counts["tcp_failed"] == 0
