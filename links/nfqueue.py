"""netspec's user-space path: packets toward a conditioned peer are queued to it by the kernel
(iptables' NFQUEUE target, linkset.py installs the rule) and given their verdict here, over
nfnetlink_queue in pure Python (an AF_NETLINK socket, NETLINK_NETFILTER): accepted at their
due instant (the delay and its jitter), dropped for a loss (independent, or in bursts:
Gilbert-Elliott). One thread per run, owned by its LinkSet, which starts and joins it.

A held packet leaves its sender at once, as it leaves a host for a real link or NIST Net's
router: the kernel hands the path the whole packet, the path drops the original there and
then (its buffer and its socket's accounting freed), and sends its copy at the due instant
through a raw socket of its own, marked so that the rule which queued the original lets it
by. Held in the kernel's queue instead, the original stayed charged to its TCP socket, whose
small-queue limit and autocorking then waited for it as if it had not left: a request in
two writes cost three one-way delays, bulk TCP two segments a delay (docs/explanations/
links-audit.md). How late each copy went (its send's instant minus its due instant) is
counted, with the drops, for the audit (`PathCounters`).

The loop, at 10,000 packets/s in pure Python: each wake reads every message queued (up to
RECEIVES, into one buffer), stamps each packet's due instant from its own read, and waits for
the next due instant or the next packet (select: to the microsecond, where epoll's wait is in
whole milliseconds), so no packet waits unread while another is released. While the held
packets are due in the order they came (one delay, no jitter) they are a FIFO; a jitter that
reorders them turns the FIFO into a heap until it empties. The originals of each wake's
packets are dropped by one batch verdict (NFQNL_MSG_VERDICT_BATCH: every packet up to an id).
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
from netspec.protocol.packets import HeldPackets

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
COPY_BYTES = 0xFFFF  # the whole packet: its copy is what reaches the peer
QUEUE_MAXLEN = 20_000  # packets held at once; past it the kernel lets them through (fail-open)
RCVBUF = 32 * 1024 * 1024  # whole packets now: a burst of 20,000 at 1,500 bytes
SNDBUF = 32 * 1024 * 1024
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33  # past net.core.[rw]mem_max, with CAP_NET_ADMIN
SO_MARK = 36
JOIN_S = 5.0
LATE_NS = 1_000_000  # a verdict later than this is counted apart
IDLE_S = 1.0
RECEIVES = 1024  # reads of the socket before the held packets' verdicts are looked at again
PACKET_KIND = (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET
# One netlink message a read: a whole packet (up to COPY_BYTES) and its attributes; a smaller
# buffer would cut a jumbo frame's copy short without a word.
BUFFER = COPY_BYTES + 4096
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
    released: int = 0
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


def _verdict_batch(queue: int, packet_id: int, verdict: int) -> bytes:
    """`verdict` for every packet still queued up to `packet_id`."""
    attrs = _attr(NFQA_VERDICT_HDR, struct.pack(">II", verdict, packet_id))
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
    """The run's queue and the thread that gives its packets their verdicts and sends the
    copies of those it holds.

    Lifecycle: `UserPath(queue, mark)` binds the queue and opens the raw socket whose sends
    carry `mark` (raises QueueError); `set` a peer's condition (by its IPv4 address) any time,
    from any thread; `close` sends every held copy (once the rules that queue packets are
    gone: the caller removes those first), unbinds and joins the thread, which closes the
    sockets it served as it ends."""

    def __init__(self, queue: int, mark: int, seed: int | None = None):
        self.queue = queue
        self.peers: dict[int, _Peer] = {}  # by the IPv4 address, as a big-endian int
        self.overruns = 0
        self.realtime: bool | None = None  # whether its thread got real-time priority
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        # Held copies (due_ns, packet id, peer, the packet, its destination): a FIFO while due
        # in the order they came, else a heap (`_ordered` says which holds them; the other is empty).
        self._fifo: deque[tuple[int, int, _Peer, bytes, str]] = deque()
        self._heap: list[tuple[int, int, _Peer, bytes, str]] = []
        self._ordered = True
        # While the packets: service captures, each packet held or dropped here is written as it
        # met the link (protocol/packets.py's HeldPackets): the wire's start, not its copy's send.
        self.held: HeldPackets | None = None
        self._buffer = bytearray(BUFFER)
        self._seq = 0
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self._wake_r, self._wake_w = os.pipe()
        self._raw: socket.socket | None = None
        try:
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF)
            except PermissionError:
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
            self._sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
            self._sock.bind((0, 0))
            # The copies' socket: IPPROTO_RAW sends each packet as it is, header included;
            # its mark is what the queueing rule lets by (kernel.iptables_rules).
            self._raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
            self._raw.setsockopt(socket.SOL_SOCKET, SO_MARK, mark)
            try:
                self._raw.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, SNDBUF)
            except PermissionError:
                self._raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SNDBUF)
            self._raw.setblocking(False)
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
            if self._stop:
                return
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
        # A copy is due at an instant, as a release or a CAMP sample is: SCHED_FIFO (as the
        # daemon's own threads that act at an instant take it), else it waits for a free core.
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            self.realtime = True
        except PermissionError:
            self.realtime = False
            _no_timer_slack()
        sock, wake = self._sock.fileno(), self._wake_r
        readable = [sock, wake]
        try:
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
        finally:
            # The thread owns what it reads and sends on: closed here, once it no longer can.
            self._close_fds()

    def _receive(self) -> None:
        """Read every message queued (up to RECEIVES): each packet passed, or its original
        dropped (one batch verdict, after the passes) and its copy held unless it is lost."""
        out: list[bytes] = []
        dropped = None  # the last id whose original goes
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
                now, wall = time.monotonic_ns(), time.time_ns()
                offset = 0
                while offset + 16 <= size:
                    length, kind = _NLMSG.unpack_from(buffer, offset)
                    if length < 16:
                        break
                    if kind == PACKET_KIND:
                        packet_id = self._packet(buffer, offset, min(offset + length, size), now, wall, out)
                        if packet_id is not None:
                            dropped = packet_id
                    offset += (length + 3) & ~3
        if dropped is not None:
            out.append(_verdict_batch(self.queue, dropped, NF_DROP))
        if out:
            self._send(out)

    def _packet(self, data: bytearray, start: int, end: int, now: int, wall: int,
                out: list[bytes]) -> int | None:
        """A queued packet: passed (its verdict into `out`: a peer with no condition, or no
        delay), or its id returned for its original to be dropped, its copy held unless lost."""
        packet_id, payload = self._walk(data, start + 20, end)
        if packet_id is None:
            return None
        if payload is None or payload[1] - payload[0] < 20:
            out.append(_verdict(self.queue, packet_id, NF_ACCEPT))
            return None
        at = payload[0]
        (dst,) = _ADDRESS.unpack_from(data, at + 16)
        peer = self.peers.get(dst)
        if peer is None:
            out.append(_verdict(self.queue, packet_id, NF_ACCEPT))
            return None
        cond, counts = peer.condition, peer.counters
        counts.queued += 1
        held = self.held
        if held is not None:
            held.write(wall, memoryview(data)[at:payload[1]])
        if cond.loss_pct:
            lost, peer.bad = drop(self._rng, cond, peer.bad)
            if lost:
                counts.dropped += 1
                return packet_id
        delay = cond.delay_ms
        if cond.jitter_ms:
            delay += jitter_ms(self._rng, cond.distribution, cond.jitter_ms)
        if delay <= 0:
            out.append(_verdict(self.queue, packet_id, NF_ACCEPT))
            return None
        item = (now + int(delay * 1e6), packet_id, peer, bytes(data[at:payload[1]]),
                socket.inet_ntoa(data[at + 16:at + 20]))
        if not self._ordered:
            heapq.heappush(self._heap, item)
        elif self._fifo and item[0] < self._fifo[-1][0]:  # out of order: a heap from here on
            self._heap = list(self._fifo)
            self._fifo.clear()
            self._ordered = False
            heapq.heappush(self._heap, item)
        else:
            self._fifo.append(item)
        return packet_id

    @staticmethod
    def _walk(data: bytearray, at: int, end: int) -> tuple[int | None, tuple[int, int] | None]:
        """The packet's id and where its payload (the IP packet) lies, by walking its attributes."""
        packet_id = payload = None
        while at + 4 <= end:
            size, kind = _ATTR.unpack_from(data, at)
            if size < 4:
                break
            kind &= 0x7FFF
            if kind == NFQA_PACKET_HDR:
                (packet_id,) = _ID.unpack_from(data, at + 4)
            elif kind == NFQA_PAYLOAD:
                payload = (at + 4, min(at + size, end))
            at += (size + 3) & ~3
        return packet_id, payload

    def _release(self, now: int | None) -> None:
        """Send every held copy that is due (all of them: `now` None), counting lateness."""
        due_now: list[tuple[int, int, _Peer, bytes, str]] = []
        with self._lock:
            if self._ordered:
                fifo = self._fifo
                while fifo and (now is None or fifo[0][0] <= now):
                    due_now.append(fifo.popleft())
            else:
                heap = self._heap
                while heap and (now is None or heap[0][0] <= now):
                    due_now.append(heapq.heappop(heap))
                if not heap:
                    self._ordered = True
        if not due_now:
            return
        sendto, late = self._raw.sendto, self._late  # type: ignore[union-attr]
        for due, _, peer, packet, dst in due_now:
            try:
                sendto(packet, (dst, 0))
            except OSError:  # the socket's buffer full, or no route: the copy is lost, said
                self.overruns += 1
                continue
            if now is not None:
                late(peer.counters, time.monotonic_ns() - due)

    @staticmethod
    def _late(counts: PathCounters, late: int) -> None:
        counts.released += 1
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
        """Send every held copy, then unbind the queue and join the thread (JOIN_S), which
        closes the sockets as it ends.

        Raises:
            QueueError: the thread did not end within JOIN_S (its sockets are left to it).
        """
        if self._stop:
            return
        with self._lock:
            self._stop = True
            os.write(self._wake_w, b"x")  # the thread closes it only once it saw the stop
        self._thread.join(JOIN_S)
        if self._thread.is_alive():
            raise QueueError(f"NFQUEUE {self.queue}: its thread did not end within {JOIN_S:.0f} s")

    def _close_fds(self) -> None:
        # Closing the netlink socket unbinds the queue: packets still queued are dropped,
        # and with the queue gone the rule's --queue-bypass lets new ones through.
        self._sock.close()
        if self._raw is not None:
            self._raw.close()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)


PR_SET_TIMERSLACK = 29  # prctl(2)


def _no_timer_slack() -> None:
    """This thread's timer slack at 1 ns, as a real-time thread's is: refused real-time
    priority (a container's cgroup has no real-time budget), its waits would otherwise end
    up to 50 us late (the default slack) on top of the wait for a core."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
