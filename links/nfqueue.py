"""netspec's user-space path: packets toward a conditioned peer are queued to it by the kernel
(iptables' NFQUEUE target, linkset.py installs the rule) and given their verdict here, over
nfnetlink_queue in pure Python (an AF_NETLINK socket, NETLINK_NETFILTER): accepted at their
due instant (the delay and its jitter), dropped for a loss (independent, or in bursts:
Gilbert-Elliott). One thread per run, owned by its LinkSet, which starts and joins it.

Each packet is copied up to its IPv4 header only (20 bytes: its destination names the peer);
its verdict is sent when due, and how late each was (the verdict's instant minus its due
instant) is counted, with the drops, for the audit (`PathCounters`).

The loop, at 10,000 packets/s in pure Python: each wake reads every message queued (up to
RECEIVES, into one buffer), stamps each packet's due instant from its own read, and waits for
the next due instant or the next packet (select: to the microsecond, where epoll's wait is in
whole milliseconds), so no packet waits unread while another is released. While the held
packets are due in the order they came (one delay, no jitter) they are a FIFO and released
by one batch verdict (NFQNL_MSG_VERDICT_BATCH: every packet up to an id); a jitter that
reorders them turns the FIFO into a heap, with a verdict per packet, until it empties.
"""

from __future__ import annotations

import heapq
import math
import os
import random
import select
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from netspec.protocol.links import LinkCondition

NETLINK_NETFILTER = 12
NETLINK_NO_ENOBUFS = 5
SOL_NETLINK = 270
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG, NFQNL_MSG_VERDICT_BATCH = 0, 1, 2, 3
NFQNL_CFG_CMD_BIND, NFQNL_CFG_CMD_UNBIND = 1, 2
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQA_CFG_F_FAIL_OPEN = 1
NFQA_PACKET_HDR, NFQA_VERDICT_HDR, NFQA_PAYLOAD = 1, 2, 10
NFQNL_COPY_PACKET = 2
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NF_DROP, NF_ACCEPT = 0, 1
COPY_BYTES = 20  # the IPv4 header: its destination address is all the path reads
QUEUE_MAXLEN = 20_000  # packets held at once; past it the kernel lets them through (fail-open)
RCVBUF = 8 * 1024 * 1024
SO_RCVBUFFORCE = 33  # past net.core.rmem_max, for a process with CAP_NET_ADMIN
JOIN_S = 5.0
LATE_NS = 1_000_000  # a verdict later than this is counted apart
IDLE_S = 1.0
RECEIVES = 1024  # reads of the socket before the held packets' verdicts are looked at again
PACKET_KIND = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET
BUFFER = 65536
_NLMSG = struct.Struct("=IH")
_ATTR = struct.Struct("=HH")
_ID = struct.Struct(">I")
_ADDRESS = struct.Struct("!I")


class QueueError(Exception):
    """The kernel refused the queue (bound by another, no nfnetlink_queue, no privilege)."""


@dataclass
class PathCounters:
    """One peer's counts on the user-space path."""

    queued: int = 0
    dropped: int = 0
    late_total_ns: int = 0
    late_max_ns: int = 0
    late_over_1ms: int = 0


@dataclass
class _Peer:
    condition: LinkCondition
    counters: PathCounters = field(default_factory=PathCounters)
    bad: bool = False  # Gilbert-Elliott's state: in a burst of losses


def _nlmsg(kind: int, flags: int, queue: int, attrs: bytes, seq: int = 0) -> bytes:
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags, seq, 0) + body


def _attr(kind: int, data: bytes) -> bytes:
    size = 4 + len(data)
    return struct.pack("=HH", size, kind) + data + b"\0" * (-size % 4)


def _verdict(queue: int, packet_id: int, verdict: int) -> bytes:
    attrs = _attr(NFQA_VERDICT_HDR, struct.pack(">II", verdict, packet_id))
    return _nlmsg(NFQNL_MSG_VERDICT, NLM_F_REQUEST, queue, attrs)


def _batch(queue: int, packet_id: int) -> bytes:
    """Accept every packet still queued up to `packet_id`."""
    attrs = _attr(NFQA_VERDICT_HDR, struct.pack(">II", NF_ACCEPT, packet_id))
    return _nlmsg(NFQNL_MSG_VERDICT_BATCH, NLM_F_REQUEST, queue, attrs)


def _key(address: str) -> int:
    return _ADDRESS.unpack(socket.inet_aton(address))[0]


def jitter_ms(rng: random.Random, distribution: str, jitter: float) -> float:
    """A jitter drawn from `distribution` (as netem names them) with `jitter` its spread: the
    half-width of uniform's interval, the standard deviation of the others."""
    if distribution == "uniform":
        return rng.uniform(-jitter, jitter)
    if distribution == "normal":
        return rng.gauss(0.0, jitter)
    pareto = (rng.paretovariate(3.0) - 1.5) / math.sqrt(0.75)  # alpha 3: mean 1.5, sd sqrt(3/4)
    if distribution == "pareto":
        return pareto * jitter
    # paretonormal: netem's mix, a quarter normal and three quarters pareto, at the same spread
    return (0.25 * rng.gauss(0.0, 1.0) + 0.75 * pareto) / math.hypot(0.25, 0.75) * jitter


def drop(rng: random.Random, cond: LinkCondition, bad: bool) -> tuple[bool, bool]:
    """Whether the next packet is lost, and the loss's state after it (Gilbert-Elliott's: in a
    burst). Independent: each lost with `loss_pct`. In bursts: a lossless good state and an
    all-lost bad one, left with 1/`loss_burst` (the burst's mean length) and entered so that
    the long-run loss is `loss_pct` (netem's `loss gemodel p r 100% 0%`)."""
    if not cond.loss_pct:
        return False, False
    if cond.loss_burst is None:
        return rng.random() < cond.loss_pct / 100, False
    enter, leave = cond.bursts()
    bad = (rng.random() >= leave) if bad else (rng.random() < enter)
    return bad, bad


class UserPath:
    """The run's queue and the thread that gives its packets their verdicts.

    Lifecycle: `UserPath(queue)` binds the queue (raises QueueError); `set` a peer's condition
    (by its IPv4 address) any time, from any thread; `close` lets every held packet through
    (once the rules that queue them are gone: the caller removes those first), unbinds and
    joins the thread."""

    def __init__(self, queue: int, seed: int | None = None):
        self.queue = queue
        self.peers: dict[int, _Peer] = {}  # by the IPv4 address, as a big-endian int
        self.overruns = 0
        self.realtime: bool | None = None  # whether its thread got real-time priority
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        # Held packets (due_ns, packet id, peer): a FIFO while due in the order they came,
        # else a heap (`_ordered` says which holds them; the other is empty).
        self._fifo: deque[tuple[int, int, _Peer]] = deque()
        self._heap: list[tuple[int, int, _Peer]] = []
        self._ordered = True
        self._buffer = bytearray(BUFFER)
        self._seq = 0
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self._wake_r, self._wake_w = os.pipe()
        try:
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
            except PermissionError:
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
            self._sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
            self._sock.bind((0, 0))
            self._config(_attr(NFQA_CFG_CMD, struct.pack(">BxH", NFQNL_CFG_CMD_BIND, socket.AF_INET)))
            self._config(_attr(NFQA_CFG_PARAMS, struct.pack(">IB", COPY_BYTES, NFQNL_COPY_PACKET))
                         + _attr(NFQA_CFG_QUEUE_MAXLEN, struct.pack(">I", QUEUE_MAXLEN))
                         + _attr(NFQA_CFG_MASK, struct.pack(">I", NFQA_CFG_F_FAIL_OPEN))
                         + _attr(NFQA_CFG_FLAGS, struct.pack(">I", NFQA_CFG_F_FAIL_OPEN)))
        except (OSError, QueueError) as exc:
            self._close_fds()
            raise QueueError(f"NFQUEUE {queue}: {exc}") from exc
        self._sock.setblocking(False)
        self._stop = False
        self._thread = threading.Thread(target=self._serve, name=f"netspec-links-q{queue}", daemon=True)
        self._thread.start()

    def _config(self, attrs: bytes) -> None:
        self._seq += 1
        self._sock.send(_nlmsg(NFQNL_MSG_CONFIG, NLM_F_REQUEST | NLM_F_ACK, self.queue, attrs, self._seq))
        data = self._sock.recv(65536)
        _, kind = struct.unpack_from("=IH", data)
        if kind == NLMSG_ERROR:
            (error,) = struct.unpack_from("=i", data, 16)
            if error:
                raise QueueError(os.strerror(-error))

    def set(self, address: str, condition: LinkCondition | None) -> None:
        """The condition of the packets toward `address` from now on (None: none queued there)."""
        key = _key(address)
        with self._lock:
            if condition is None or condition.empty:
                self.peers.pop(key, None)
            elif key in self.peers:
                self.peers[key].condition = condition
            else:
                self.peers[key] = _Peer(condition)
        os.write(self._wake_w, b"x")

    def counters(self, address: str) -> PathCounters | None:
        peer = self.peers.get(_key(address))
        return None if peer is None else PathCounters(**vars(peer.counters))

    def _serve(self) -> None:
        # A verdict is due at an instant, as a release or a CAMP sample is: SCHED_FIFO (as the
        # daemon's own threads that act at an instant take it), else it waits for a free core.
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            self.realtime = True
        except PermissionError:
            self.realtime = False
        sock, wake = self._sock.fileno(), self._wake_r
        readable = [sock, wake]
        while not self._stop:
            held = self._fifo or self._heap
            due = (self._fifo[0][0] if self._ordered else self._heap[0][0]) if held else None
            wait = IDLE_S if due is None else max(0.0, min(IDLE_S, (due - time.monotonic_ns()) / 1e9))
            # select waits to the microsecond (a real-time thread has no timer slack): the
            # thread wakes at the next due instant or at the next packet, whichever is first.
            ready = select.select(readable, (), (), wait)[0]
            if ready:
                if wake in ready:
                    os.read(wake, 4096)
                if sock in ready:
                    self._receive()
            self._release(time.monotonic_ns())
        self._release(None)

    def _receive(self) -> None:
        """Read every message queued (up to RECEIVES): each packet dropped, passed or held."""
        out: list[bytes] = []
        buffer, recv_into = self._buffer, self._sock.recv_into
        with self._lock:
            for _ in range(RECEIVES):
                try:
                    size = recv_into(buffer)
                except BlockingIOError:
                    break
                except OSError:  # ENOBUFS: packets the kernel could not hand up (fail-open or queued)
                    self.overruns += 1
                    break
                now = time.monotonic_ns()
                offset = 0
                while offset + 16 <= size:
                    length, kind = _NLMSG.unpack_from(buffer, offset)
                    if length < 16:
                        break
                    if kind == PACKET_KIND:
                        self._packet(buffer, offset, min(offset + length, size), now, out)
                    offset += (length + 3) & ~3
        if out:
            self._send(out)

    def _packet(self, data: bytearray, start: int, end: int, now: int, out: list[bytes]) -> None:
        """A queued packet: its verdict now into `out` (a drop, or a peer with no condition),
        or held. The kernel puts the packet's header attribute first and its payload (the
        20 bytes copied) last: read there, else by walking the attributes."""
        packet_id = dst = None
        size, kind = _ATTR.unpack_from(data, start + 20)
        if kind & 0x7FFF == NFQA_PACKET_HDR and size >= 8:
            (packet_id,) = _ID.unpack_from(data, start + 24)
            size, kind = _ATTR.unpack_from(data, end - 24)
            if kind & 0x7FFF == NFQA_PAYLOAD and size == 24:
                (dst,) = _ADDRESS.unpack_from(data, end - 4)
        if packet_id is None or dst is None:
            packet_id, dst = self._walk(data, start + 20, end)
            if packet_id is None:
                return
        peer = self.peers.get(dst) if dst is not None else None
        if peer is None:
            out.append(_verdict(self.queue, packet_id, NF_ACCEPT))
            return
        cond, counts = peer.condition, peer.counters
        counts.queued += 1
        if cond.loss_pct:
            lost, peer.bad = drop(self._rng, cond, peer.bad)
            if lost:
                counts.dropped += 1
                out.append(_verdict(self.queue, packet_id, NF_DROP))
                return
        delay = cond.delay_ms
        if cond.jitter_ms:
            delay += jitter_ms(self._rng, cond.distribution, cond.jitter_ms)
        if delay <= 0:
            out.append(_verdict(self.queue, packet_id, NF_ACCEPT))
            return
        item = (now + int(delay * 1e6), packet_id, peer)
        if not self._ordered:
            heapq.heappush(self._heap, item)
        elif self._fifo and item[0] < self._fifo[-1][0]:  # out of order: a heap from here on
            self._heap = list(self._fifo)
            self._fifo.clear()
            self._ordered = False
            heapq.heappush(self._heap, item)
        else:
            self._fifo.append(item)

    @staticmethod
    def _walk(data: bytearray, at: int, end: int) -> tuple[int | None, int | None]:
        """The packet's id and destination, by walking its attributes."""
        packet_id = dst = None
        while at + 4 <= end:
            size, kind = _ATTR.unpack_from(data, at)
            if size < 4:
                break
            kind &= 0x7FFF
            if kind == NFQA_PACKET_HDR:
                (packet_id,) = _ID.unpack_from(data, at + 4)
            elif kind == NFQA_PAYLOAD and size >= 4 + 20:
                (dst,) = _ADDRESS.unpack_from(data, at + 4 + 16)
            at += (size + 3) & ~3
        return packet_id, dst

    def _release(self, now: int | None) -> None:
        """Accept every held packet that is due (all of them: `now` None), counting lateness:
        the FIFO's by one batch verdict, the heap's one by one."""
        out: list[bytes] = []
        with self._lock:
            at = time.monotonic_ns()
            if self._ordered:
                fifo, last = self._fifo, None
                while fifo and (now is None or fifo[0][0] <= now):
                    due, last, peer = fifo.popleft()
                    if now is not None:
                        self._late(peer.counters, at - due)
                if last is not None:
                    out.append(_batch(self.queue, last))
            else:
                heap = self._heap
                while heap and (now is None or heap[0][0] <= now):
                    due, packet_id, peer = heapq.heappop(heap)
                    out.append(_verdict(self.queue, packet_id, NF_ACCEPT))
                    if now is not None:
                        self._late(peer.counters, at - due)
                if not heap:
                    self._ordered = True
        if out:
            self._send(out)

    @staticmethod
    def _late(counts: PathCounters, late: int) -> None:
        counts.late_total_ns += late
        if late > counts.late_max_ns:
            counts.late_max_ns = late
        if late > LATE_NS:
            counts.late_over_1ms += 1

    def _send(self, messages: list[bytes]) -> None:
        # A verdict the kernel refuses (its packet gone from the queue) comes back as an error
        # message, which `_receive` passes over; the batch's others are taken all the same.
        for start in range(0, len(messages), 256):
            try:
                self._sock.send(b"".join(messages[start:start + 256]))
            except BlockingIOError:
                # The socket's buffer full: these packets wait in the kernel's queue until it is
                # unbound (then dropped), counted with the packets it could not hand up.
                self.overruns += len(messages[start:start + 256])

    def close(self) -> None:
        """Let every held packet through, unbind the queue and join the thread (JOIN_S)."""
        if self._stop:
            return
        self._stop = True
        os.write(self._wake_w, b"x")
        self._thread.join(JOIN_S)
        try:
            self._sock.setblocking(True)
            self._sock.settimeout(1.0)
            self._config(_attr(NFQA_CFG_CMD, struct.pack(">BxH", NFQNL_CFG_CMD_UNBIND, socket.AF_INET)))
        except (OSError, QueueError):
            pass  # closing the socket unbinds it all the same
        self._close_fds()

    def _close_fds(self) -> None:
        self._sock.close()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
