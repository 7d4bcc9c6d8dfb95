"""The `packets:` service's records: what a host's capture of the experiment's own packets
was asked (`PacketsSpec`, in the setup) and what it did (`CaptureRecord`, the file beside each
capture), written by the daemon (daemon/packets.py) and read by the merge (analysis/packets.py).

A capture is one pcap file per interface, nanosecond stamps (the kernel's CLOCK_REALTIME, as
clksync's probes' are), beside its record `packets.<window>.<interface>.json`: the interface's own
addresses (which say a packet's direction: sent from one of them, or received), the bounds
it ran under and what its capture counted, dropped and left out.
"""

from __future__ import annotations

import struct
import threading
from pathlib import Path
from typing import Annotated, BinaryIO

import msgspec

NANO_MAGIC = 0xA1B23C4D  # a pcap file of nanosecond stamps
RAW_IPV4 = 101  # its link type where each record is an IP packet from its first byte
PACKETS_DIR = "packets"  # under a host's streams directory, collected with the streams
SNAPLEN = 128  # bytes of each packet kept: Ethernet, IP and TCP headers with their options
MAX_SNAPLEN = 65535
BUFFER_KIB = 8192  # a capture's kernel buffer: a burst of some 60,000 small packets
MAX_PACKETS = 1_000_000  # a capture's packets at most, per interface: it stops there and says so
# pcap-filter words a user's filter may use: an expression, never a shell's or a file's
FILTER_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .:/()!&|<>=-[]")


class PacketsSpec(msgspec.Struct, kw_only=True, frozen=True):
    """What a host captures (`services: packets:`): each packet of its experiment interfaces
    (every one but loopback) between the logging steps, `snaplen` bytes of it, at most
    `count` packets an interface, through a kernel buffer of `buffer_kib` (a burst it cannot
    take is dropped, and counted); only `ports` (TCP or UDP, either end) if given, and only what
    `filter` (a pcap-filter expression) takes if given; never netspec's own traffic (the
    daemons', SSH's, clksync's and the link audit's ports, as the daemon knows them) unless `own`."""

    snaplen: Annotated[int, msgspec.Meta(ge=64, le=MAX_SNAPLEN)] = SNAPLEN
    count: Annotated[int, msgspec.Meta(ge=1, le=100_000_000)] = MAX_PACKETS
    ports: list[Annotated[int, msgspec.Meta(ge=1, le=65535)]] = []
    filter: str = ""
    own: bool = False
    buffer_kib: Annotated[int, msgspec.Meta(ge=64, le=1 << 20)] = BUFFER_KIB

    def __post_init__(self) -> None:
        if not set(self.filter) <= FILTER_CHARS:
            raise ValueError(f"a packets filter is a pcap-filter expression; this has "
                             f"{''.join(sorted(set(self.filter) - FILTER_CHARS))!r}")


class CaptureRecord(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One interface's capture on one host: its pcap file (`file`, beside this record), the
    interface's IPv4 addresses, the filter it ran with, when it ran (this host's clock), and
    what it counted: packets written, seen by the filter, dropped by the kernel (the capture
    could not keep up), whether it stopped at its `count` limit, and the CPU it took;
    `error` if it did not run."""

    host: str
    interface: str
    window: int = 1  # which logging window of the run (each start_logging's captures anew)
    file: str
    addresses: list[str] = []
    filter: str = ""
    snaplen: int = SNAPLEN
    count: int = MAX_PACKETS
    buffer_kib: int = BUFFER_KIB
    started_ns: int | None = None
    stopped_ns: int | None = None
    captured: int | None = None
    received: int | None = None
    dropped: int | None = None
    limited: bool = False
    cpu_s: float | None = None  # tcpdump's CPU, user and system, as it was stopped
    error: str = ""


class HeldPackets:
    """A pcap of raw IPv4 packets (link type 101) with nanosecond stamps, written by netspec's
    user-space link path (netspec.links.nfqueue) as it takes each packet it holds for a
    delay or drops for a loss: the instant the packet met the emulated link, which the
    interface's capture, seeing its copy leave at its due instant, cannot give. Any thread
    may `write` while another `close`s it."""

    def __init__(self, path: Path, snaplen: int):
        self.path, self.snaplen = path, snaplen
        self._lock = threading.Lock()
        self._file: BinaryIO | None = open(path, "wb")  # noqa: SIM115 (closed by `close`)
        self._file.write(struct.pack("<IHHiIII", NANO_MAGIC, 2, 4, 0, 0, snaplen, RAW_IPV4))
        self.written = 0

    def write(self, at_ns: int, packet: bytes | bytearray | memoryview) -> None:
        kept = packet[:self.snaplen]
        with self._lock:
            if self._file is not None:
                self._file.write(struct.pack("<IIII", at_ns // 1_000_000_000, at_ns % 1_000_000_000,
                                             len(kept), len(packet)))
                self._file.write(kept)
                self.written += 1

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def held_path(directory: Path, window: int) -> Path:
    return directory / f"packets.{window}.held.pcap"


def record_path(directory: Path, window: int, interface: str) -> Path:
    return directory / f"packets.{window}.{interface}.json"


def pcap_path(directory: Path, window: int, interface: str) -> Path:
    return directory / f"packets.{window}.{interface}.pcap"


def write_record(directory: Path, record: CaptureRecord) -> None:
    record_path(directory, record.window, record.interface).write_bytes(msgspec.json.encode(record))


def read_records(directory: Path) -> list[CaptureRecord]:
    """Every capture's record under a host's `directory` (its packets directory), by interface.

    Raises:
        ValueError: a record is not one (naming its file).
    """
    out = []
    for path in sorted(directory.glob("packets.*.json")):
        try:
            out.append(msgspec.json.decode(path.read_bytes(), type=CaptureRecord))
        except msgspec.DecodeError as exc:
            raise ValueError(f"{path}: not a capture's record ({exc})") from None
    return out
