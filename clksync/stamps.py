"""Kernel software timestamps on a UDP socket (SO_TIMESTAMPING), read as integer ns.

RX stamps come with each datagram as ancillary data; the TX stamp of a sent datagram comes
back on the socket's error queue, numbered by OPT_ID and without the payload (OPT_TSONLY).
A socket enabled without TX stamps asks one for a datagram by sending it with ASK_TX (Linux
4.13 on): OPT_ID then counts those datagrams alone. Both are CLOCK_REALTIME, the clock
streams are stamped in.
"""

from __future__ import annotations

import select
import socket
import struct
import time

SO_TIMESTAMPING = 37  # linux/asm-generic/socket.h; the socket module does not name it
SOF_TIMESTAMPING_TX_SOFTWARE = 1 << 1
SOF_TIMESTAMPING_RX_SOFTWARE = 1 << 3
SOF_TIMESTAMPING_SOFTWARE = 1 << 4
SOF_TIMESTAMPING_OPT_ID = 1 << 7
SOF_TIMESTAMPING_OPT_TSONLY = 1 << 11
RX_FLAGS = (SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE | SOF_TIMESTAMPING_OPT_ID
            | SOF_TIMESTAMPING_OPT_TSONLY)
# sendmsg's ancillary data asking for the TX stamp of that datagram alone.
ASK_TX = [(socket.SOL_SOCKET, SO_TIMESTAMPING, struct.pack("=I", SOF_TIMESTAMPING_TX_SOFTWARE))]
IP_RECVERR = 11
SO_EE_ORIGIN_TIMESTAMPING = 4
ANCILLARY_SIZE = 256
_TIMESPECS = struct.Struct("=6q")  # struct scm_timestamping: ts[0] is the software stamp
_EXTENDED_ERR = struct.Struct("=IBBBBII")  # struct sock_extended_err


def enable(sock: socket.socket, tx: bool = True) -> bool:
    """Ask for kernel RX software stamps and, with `tx`, TX stamps of every datagram sent;
    False if this kernel will not give them."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING,
                        RX_FLAGS | (SOF_TIMESTAMPING_TX_SOFTWARE if tx else 0))
    except OSError:
        return False
    return True


def _software_stamp(level: int, kind: int, data: bytes) -> int | None:
    if level != socket.SOL_SOCKET or kind != SO_TIMESTAMPING or len(data) < _TIMESPECS.size:
        return None
    sec, nsec = _TIMESPECS.unpack_from(data)[:2]
    return sec * 1_000_000_000 + nsec if sec or nsec else None


def rx_stamp(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The kernel's receive time of a datagram, from recvmsg's ancillary data."""
    for level, kind, data in ancillary:
        stamp = _software_stamp(level, kind, data)
        if stamp is not None:
            return stamp
    return None


def tx_stamp(sock: socket.socket, number: int, timeout_s: float) -> int | None:
    """The kernel send time of the datagram `number` (OPT_ID: the socket's count of stamped
    datagrams, from 0), waiting up to `timeout_s` for it; the stamps of others read on the
    way are dropped. A software TX stamp is most often queued before send returns, so the
    queue is read before any wait."""
    deadline = None
    while True:
        got = _next_tx_stamp(sock)
        if got is not None:
            if got[0] == number:
                return got[1]
            continue
        if deadline is None:
            deadline = time.monotonic() + timeout_s
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        poller = select.poll()
        poller.register(sock, select.POLLERR)
        if not poller.poll(left * 1000):
            return None


def drop_tx_stamps(sock: socket.socket) -> None:
    """Empty the error queue of stamps nobody waits for any more."""
    while _next_tx_stamp(sock) is not None:
        pass


def _next_tx_stamp(sock: socket.socket) -> tuple[int | None, int | None] | None:
    """The next (OPT_ID number, stamp) on the error queue, either None where the entry lacks
    it; None if the queue is empty."""
    try:
        _, ancillary, _, _ = sock.recvmsg(0, ANCILLARY_SIZE, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError, TimeoutError):
        return None
    stamp, number = None, None
    for level, kind, data in ancillary:
        if kind == SO_TIMESTAMPING:
            stamp = _software_stamp(level, kind, data)
        elif level == socket.SOL_IP and kind == IP_RECVERR and len(data) >= _EXTENDED_ERR.size:
            _, origin, _, _, _, _, data_id = _EXTENDED_ERR.unpack_from(data)
            if origin == SO_EE_ORIGIN_TIMESTAMPING:
                number = data_id
    return number, stamp
