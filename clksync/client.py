"""The probe client on every other host: one exchange is a request, the server's reply and
follow-up, and four timestamps, kernel ones where the kernel gives them."""

from __future__ import annotations

import itertools
import select
import socket
import time
from dataclasses import dataclass

from . import packets, stamps

EXCHANGE_TIMEOUT_S = 0.25
TX_STAMP_WAIT_S = 0.005
# The first exchange after a pause crosses a cold path: measured through a router namespace,
# its request took 13 us at best against 4 us for the reply that follows on a path just
# warmed, a 4 us bias no two-way probe can see. By the fourth exchange back to back the two
# directions differ by 0.3 us; the fit keeps each bin's fastest exchange, a warm one.
VOLLEY = 4


@dataclass(frozen=True)
class Exchange:
    """t1 request sent and t4 reply received (host clock), t2 request received and t3
    reply sent (reference clock); kernel stamps if `kernel`, else the user-space u1..u4."""

    seq: int
    kernel: bool
    t1: int
    t2: int
    t3: int
    t4: int
    u1: int
    u2: int
    u3: int
    u4: int

    @property
    def half_width(self) -> int:
        return ((self.t4 - self.t1) - (self.t3 - self.t2)) // 2

    @property
    def offset(self) -> int:
        return ((self.t1 - self.t2) + (self.t4 - self.t3)) // 2


class ProbeClient:
    """Lifecycle: created with its socket, `exchange` from one thread, `close`."""

    def __init__(self, address: str, port: int, key: bytes, kernel: bool = True):
        self.key = key
        self.server = (address, port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(self.server)
        self.kernel = kernel and stamps.enable(self.sock)
        self.sent = 0
        self.poller = select.poll()
        self.poller.register(self.sock, select.POLLIN | select.POLLERR)
        self.seqs = itertools.count(1)
        self.lost = 0

    def exchange(self, timeout_s: float = EXCHANGE_TIMEOUT_S) -> Exchange | None:
        """One exchange, or None if the server's answers did not all come in time."""
        seq = next(self.seqs) & 0xFFFFFFFF
        u1 = time.time_ns()
        self.sock.send(packets.request(self.key, seq))
        request_id, self.sent = self.sent, self.sent + 1
        # Most often queued as send returns: taken now, it does not end the first wait.
        t1 = stamps.tx_stamp(self.sock, request_id, 0) if self.kernel else None
        reply = followup = t4 = u4 = None
        deadline = time.monotonic() + timeout_s
        while reply is None or followup is None:
            left = deadline - time.monotonic()
            if left <= 0 or not self.poller.poll(left * 1000):
                self.lost += 1
                return None
            if self.kernel and t1 is None:
                t1 = stamps.tx_stamp(self.sock, request_id, 0)
            try:
                data, ancillary, _, _ = self.sock.recvmsg(packets.REQUEST_SIZE, stamps.ANCILLARY_SIZE,
                                                          socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                continue
            except ConnectionRefusedError:  # the server's port is closed: an ICMP came back
                self.lost += 1
                return None
            now = time.time_ns()
            answer = packets.parse(self.key, data)
            if answer is None or answer.seq != seq:
                continue  # forged, or a late answer to an exchange already given up
            if isinstance(answer, packets.Reply):
                reply, u4, t4 = answer, now, stamps.rx_stamp(ancillary) if self.kernel else None
            else:
                followup = answer
        if self.kernel and t1 is None:
            t1 = stamps.tx_stamp(self.sock, request_id, TX_STAMP_WAIT_S)
        kernel = None not in (t1, reply.t2, followup.t3, t4)
        if kernel:
            return Exchange(seq, True, t1, reply.t2, followup.t3, t4, u1, reply.u2, reply.u3, u4)
        return Exchange(seq, False, u1, reply.u2, reply.u3, u4, u1, reply.u2, reply.u3, u4)

    def volley(self, count: int = VOLLEY) -> list[Exchange]:
        """`count` exchanges back to back, those that completed."""
        return [ex for ex in (self.exchange() for _ in range(count)) if ex is not None]

    def close(self) -> None:
        self.sock.close()
