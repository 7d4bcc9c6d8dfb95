"""Kernel software timestamps on a UDP socket (SO_TIMESTAMPING), read as integer ns.

RX stamps come with each datagram as ancillary data; the TX stamp of a sent datagram comes
back on the socket's error queue, numbered by OPT_ID and without the payload (OPT_TSONLY).
Both are CLOCK_REALTIME, the clock streams are stamped in.
"""

from __future__ import annotations

import select
import socket
import struct

SO_TIMESTAMPING = 37  # linux/asm-generic/socket.h; the socket module does not name it
SOF_TIMESTAMPING_TX_SOFTWARE = 1 << 1
SOF_TIMESTAMPING_RX_SOFTWARE = 1 << 3
SOF_TIMESTAMPING_SOFTWARE = 1 << 4
SOF_TIMESTAMPING_OPT_ID = 1 << 7
SOF_TIMESTAMPING_OPT_TSONLY = 1 << 11
FLAGS = (SOF_TIMESTAMPING_TX_SOFTWARE | SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE
         | SOF_TIMESTAMPING_OPT_ID | SOF_TIMESTAMPING_OPT_TSONLY)
IP_RECVERR = 11
SO_EE_ORIGIN_TIMESTAMPING = 4
ANCILLARY_SIZE = 256
_TIMESPECS = struct.Struct("=6q")  # struct scm_timestamping: ts[0] is the software stamp
_EXTENDED_ERR = struct.Struct("=IBBBBII")  # struct sock_extended_err


def enable(sock: socket.socket) -> bool:
    """Ask for kernel TX and RX software stamps; False if this kernel will not give them."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, FLAGS)
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


def tx_stamps(sock: socket.socket, timeout_s: float) -> dict[int, int]:
    """Wait up to `timeout_s` for TX stamps on the error queue and take all that are there:
    OPT_ID number (the socket's count of datagrams sent, from 0) -> kernel send time."""
    found: dict[int, int] = {}
    poller = select.poll()
    poller.register(sock, select.POLLERR)
    if not poller.poll(timeout_s * 1000):
        return found
    while True:
        try:
            _, ancillary, _, _ = sock.recvmsg(0, ANCILLARY_SIZE, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return found
        stamp, number = None, None
        for level, kind, data in ancillary:
            if kind == SO_TIMESTAMPING:
                stamp = _software_stamp(level, kind, data)
            elif level == socket.SOL_IP and kind == IP_RECVERR and len(data) >= _EXTENDED_ERR.size:
                _, origin, _, _, _, _, data_id = _EXTENDED_ERR.unpack_from(data)
                if origin == SO_EE_ORIGIN_TIMESTAMPING:
                    number = data_id
        if stamp is not None and number is not None:
            found[number] = stamp
