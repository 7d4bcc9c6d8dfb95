"""Probe server and client on loopback with real kernel timestamps, and the clock watch."""

import errno
import itertools
import os
import select
import socket
import threading
import time

import pytest
from netspec.clksync import packets, watch
from netspec.clksync.client import ProbeClient
from netspec.clksync.server import BURST, ProbeServer, RateLimit

KEY = os.urandom(packets.KEY_BYTES)


@pytest.fixture
def server():
    srv = ProbeServer("127.0.0.1", KEY)
    stop = threading.Event()
    thread = threading.Thread(target=lambda: [srv.handle(0.05) for _ in iter(stop.is_set, True)])
    thread.start()
    yield srv
    stop.set()
    thread.join()
    srv.close()


def run_exchanges(client, n=20):
    found = []
    for _ in range(n):
        found.append(client.exchange(timeout_s=5.0))  # what is tested is the stamps, not the loss
        time.sleep(0.005)
    client.close()
    return found


@pytest.mark.parametrize("kernel", [True, False])
def test_exchanges_carry_ordered_timestamps_from_the_kernel_or_marked_user_space(server, kernel):
    found = run_exchanges(ProbeClient("127.0.0.1", server.port, KEY, kernel=kernel))
    assert None not in found
    # Under load a TX stamp can miss its wait; such an exchange must say it fell back to user space.
    stamped = [e for e in found if e.kernel]
    assert len(stamped) >= (1 if kernel else 0) and not (stamped and not kernel)
    for e in found:
        assert e.t1 < e.t2 <= e.t3 < e.t4 and e.u1 <= e.u4  # one clock: causality holds
        assert e.u1 <= e.t1 if e.kernel else (e.t1, e.t4) == (e.u1, e.u4)
        assert abs(e.offset) <= e.half_width + 1  # the true offset, 0, is within the exchange's bound
    assert [e.seq for e in found] == list(range(1, 21))


@pytest.mark.timing
def test_a_volley_is_back_to_back_exchanges_and_leaves_the_server_nothing_to_wake_for():
    srv = ProbeServer("127.0.0.1", KEY)
    client = ProbeClient("127.0.0.1", srv.port, KEY)
    stop = threading.Event()
    thread = threading.Thread(target=lambda: [srv.handle(0.02) for _ in iter(stop.is_set, True)])
    thread.start()
    volley = client.volley(4)
    stop.set()
    thread.join()
    assert [e.seq for e in volley] == [1, 2, 3, 4] and all(e.kernel for e in volley)
    assert all(a.t4 < b.t1 for a, b in itertools.pairwise(volley))
    # The replies' TX stamps were taken and no follow-up asked for one: nothing is left on
    # the error queue (a poll reports it whatever it asks for), so a poll sleeps.
    idle = select.poll()
    idle.register(srv.sock, select.POLLIN)
    assert idle.poll(0) == []
    client.close()
    srv.close()


def test_an_answer_carries_the_replys_kernel_send_time_and_leaves_the_server_no_stamp_to_read():
    srv = ProbeServer("127.0.0.1", KEY)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("127.0.0.1", srv.port))
        sent = time.time_ns()
        sock.send(packets.request(KEY, 7))
        srv.handle(5.0)
        reply, followup = (packets.parse(KEY, sock.recv(100)) for _ in range(2))
    assert (reply.seq, followup.seq) == (7, 7) and sent < reply.t2 <= followup.t3 < time.time_ns()
    # Only the reply asked the kernel for its TX stamp, and the server took it: the follow-up's
    # would be left on the error queue, which ends every poll whatever it asks for.
    idle = select.poll()
    idle.register(srv.sock, select.POLLIN)
    assert idle.poll(0) == []
    srv.close()


class KernelBefore413:
    """A server socket as a kernel before 4.13 has it: sendmsg refuses a TX stamp asked
    for one datagram (EINVAL); everything else is the real socket's."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def __getattr__(self, name: str):
        return getattr(self.sock, name)

    def sendmsg(self, *args):
        raise OSError(errno.EINVAL, "Invalid argument")


def test_a_kernel_that_refuses_a_stamp_asked_per_datagram_gets_answers_marked_user_space():
    srv = ProbeServer("127.0.0.1", KEY)
    srv.sock = KernelBefore413(srv.sock)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("127.0.0.1", srv.port))
        answers = []
        for seq in (1, 2):
            sock.send(packets.request(KEY, seq))
            srv.handle(5.0)
            answers += [packets.parse(KEY, sock.recv(100)) for _ in range(2)]
    assert [a.seq for a in answers] == [1, 1, 2, 2] and not srv.kernel
    assert answers[1].t3 is None and (answers[2].t2, answers[3].t3) == (None, None)
    srv.close()


def test_the_server_answers_only_requests_signed_with_the_runs_key_and_never_with_more_bytes(server):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(0.3)
    good = packets.request(KEY, 1)
    flipped = good[:-1] + bytes([good[-1] ^ 1])
    for bad in (b"x" * 47, good + b"x", b"\0" * packets.REQUEST_SIZE, b"y" * 4000, flipped,
                packets.request(os.urandom(packets.KEY_BYTES), 1)):
        sock.sendto(bad, ("127.0.0.1", server.port))
        with pytest.raises(TimeoutError):
            sock.recv(65536)
    assert server.refused == 6
    sock.sendto(packets.request(KEY, 7), ("127.0.0.1", server.port))
    answers = [sock.recv(65536) for _ in range(2)]
    assert all(len(a) <= packets.REQUEST_SIZE for a in answers)
    assert [type(packets.parse(KEY, a)).__name__ for a in answers] == ["Reply", "Followup"]
    assert [packets.parse(os.urandom(packets.KEY_BYTES), a) for a in answers] == [None, None]
    sock.close()


def test_a_client_takes_no_answer_it_cannot_verify(server):
    client = ProbeClient("127.0.0.1", server.port, os.urandom(packets.KEY_BYTES))
    assert client.exchange(timeout_s=0.3) is None
    assert client.lost == 1 and server.refused == 1
    client.close()


def test_a_peer_gets_its_burst_then_the_rate():
    limit = RateLimit(rate=100.0, burst=BURST)
    assert sum(limit.allow(("10.0.0.1", 5000), 0.0) for _ in range(200)) == BURST
    assert limit.allow(("10.0.0.2", 5000), 0.0)  # others are not held back
    # Nor another prober at the same address (local daemons all probe from 127.0.0.1).
    assert limit.allow(("10.0.0.1", 5001), 0.0)
    assert sum(limit.allow(("10.0.0.1", 5000), 0.5) for _ in range(200)) == BURST  # refilled after 0.5 s


def test_a_rate_change_is_seen_against_the_raw_clock(monkeypatch):
    # realtime runs 20 ppm fast against raw from the first check on
    readings = iter([(1_000, 0, 0)] + [(1_000 + int(t * 1.00002), t, 0)
                                       for t in range(10**9, 10 * 10**9, 10**9)])
    monkeypatch.setattr(watch, "clock_pair", lambda: next(readings))
    seen = []
    w = watch.ClockWatch(seen.append)
    while not seen:
        w.check()
    w.close()
    assert seen[0].kind == "rate" and 19 < seen[0].ppm_after < 21


def test_readings_made_uncertain_by_a_busy_host_are_no_change_of_rate(monkeypatch):
    # No change at all, but each realtime reading off by up to half its 20 us spread (a
    # preempted read on a loaded host): 8 us over 2 s would read as 4 ppm.
    readings = iter([(1_000 + (8_000 if i % 4 in (1, 2) else -8_000) + t, t, 20_000)
                     for i, t in enumerate(range(0, 20 * 10**9, 10**9))])
    monkeypatch.setattr(watch, "clock_pair", lambda: next(readings))
    seen = []
    w = watch.ClockWatch(seen.append)
    for _ in range(19):
        w.check()
    w.close()
    assert not [c for c in seen if c.kind == "rate"]


@pytest.mark.skipif(os.geteuid() != 0, reason="setting CLOCK_REALTIME needs root")
def test_a_clock_set_is_reported_as_a_step():
    seen = []
    w = watch.ClockWatch(seen.append)
    assert not w.check()
    # Set the clock to what it reads: the kernel reports a set all the same, and the
    # machine's clock moves by the few us this line takes.
    time.clock_settime_ns(time.CLOCK_REALTIME, time.clock_gettime_ns(time.CLOCK_REALTIME))
    assert w.check()
    w.close()
    assert seen[0].kind == "step" and abs(seen[0].jump_ns) < 1_000_000
