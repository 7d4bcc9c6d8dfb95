"""The probe server on the reference host: answers each well-formed request signed with the
run's probe key with a reply
(its kernel RX stamp) and a follow-up (the reply's kernel TX stamp), never with more bytes
than the request had, asking the kernel for the reply's TX stamp alone (a follow-up's would
only wake the server to be thrown away), and at most RATE_PER_PEER requests a second from any one prober's
socket (address and port: hosts that share an address, as local daemons share 127.0.0.1,
are each a prober of their own)."""

from __future__ import annotations

import errno
import select
import socket
import time
from collections import OrderedDict

from . import packets, stamps

RATE_PER_PEER = 500.0
BURST = 50.0
MAX_PEERS = 4096
TX_STAMP_WAIT_S = 0.005


class RateLimit:
    """A token bucket per source (address, port); the least recently seen source is
    forgotten once MAX_PEERS are tracked."""

    def __init__(self, rate: float = RATE_PER_PEER, burst: float = BURST):
        self.rate, self.burst = rate, burst
        self.peers: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def allow(self, peer: tuple[str, int], now: float) -> bool:
        tokens, last = self.peers.pop(peer, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        allowed = tokens >= 1.0
        self.peers[peer] = (tokens - 1.0 if allowed else tokens, now)
        if len(self.peers) > MAX_PEERS:
            self.peers.popitem(last=False)
        return allowed


class ProbeServer:
    """Lifecycle: bound at creation, `handle` in a loop from one thread, `close`."""

    def __init__(self, address: str, key: bytes, kernel: bool = True, port: int = 0):
        self.key = key
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((address, port))
        self.port: int = self.sock.getsockname()[1]
        self.kernel = kernel and stamps.enable(self.sock, tx=False)
        self.stamped = 0  # the kernel's OPT_ID count of replies sent with a TX stamp asked
        self.limit = RateLimit()
        self.poller = select.poll()
        self.poller.register(self.sock, select.POLLIN)
        self.answered = self.refused = 0

    def handle(self, timeout_s: float) -> None:
        """Answer the requests that arrive within `timeout_s`."""
        events = self.poller.poll(timeout_s * 1000)
        if not events:
            return
        if events[0][1] & select.POLLERR:
            # A reply's TX stamp that came after its wait: left queued it would end every poll.
            stamps.drop_tx_stamps(self.sock)
        try:
            data, ancillary, _, peer = self.sock.recvmsg(packets.REQUEST_SIZE + 1, stamps.ANCILLARY_SIZE,
                                                         socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        u2 = time.time_ns()
        seq = packets.request_seq(self.key, data)
        if seq is None or not self.limit.allow(peer[:2], time.monotonic()):
            self.refused += 1
            return
        t2 = stamps.rx_stamp(ancillary) if self.kernel else None
        u3 = time.time_ns()
        t3 = self._send_reply(packets.reply(self.key, seq, t2, u2, u3), peer)
        self.sock.sendto(packets.followup(self.key, seq, t3), peer)
        self.answered += 1

    def _send_reply(self, reply: bytes, peer: tuple[str, int]) -> int | None:
        """Send the reply; its kernel TX stamp, if this socket gives them."""
        if self.kernel:
            try:
                self.sock.sendmsg([reply], stamps.ASK_TX, 0, peer)
            except OSError as exc:  # a kernel before 4.13 takes no stamp asked per datagram
                if exc.errno != errno.EINVAL:
                    raise
                self.kernel = False
            else:
                self.stamped += 1
                return stamps.tx_stamp(self.sock, self.stamped - 1, TX_STAMP_WAIT_S)
        self.sock.sendto(reply, peer)
        return None

    def close(self) -> None:
        self.sock.close()
