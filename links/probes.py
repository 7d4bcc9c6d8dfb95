"""The audit's probe traffic: low-rate UDP probes from this host to each peer it has a link
to (and TCP ones beside them, tcpprobes.py), at random instants, on a port of their own
that the link conditions shape (netspec's own control and clock traffic is not shaped;
these are, since they measure the link).

Each probe carries the run's tag, its sequence number, its send stamp (this host's
CLOCK_REALTIME, read just before the send, so everything the link does to it lies between
the two stamps) and the sender's name. The receiver takes the kernel's receive stamp
(SO_TIMESTAMPNS; clksync/stamps.py reads SO_TIMESTAMPING, but links/ stands beside clksync,
neither importing the other) and logs both in the host's `links` stream: a `LINKS/probe` event
at the receive stamp, its data a `ProbeRecord` (datastream/schema.py); the sender logs each
probe it sends as a `LINKS/sent` event (data `SentRecord`), so a probe never received is
counted lost. The merge puts both on the global timeline; analysis/links.py audits them.

Sends are a Poisson process per peer (exponential gaps; clksync's volleys and CAMP's samples
are spread too, uniformly), so probing never keeps step with a periodic workload. The
rate is at most 1 % of the link's configured capacity (`probes_per_s`), DEFAULT_PER_S where
the link has no rate.
"""

from __future__ import annotations

import hashlib
import os
import random
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import msgspec
from netspec.datastream.instrument import Datastreams
from netspec.datastream.schema import ProbeCounts, ProbeRecord, SentRecord
from netspec.protocol.errors import NetspecError

from .tcpprobes import TcpProbes

MAGIC = b"NSLP"
_HEAD = struct.Struct("!4s8sQqB")  # magic, the run's tag, seq, sent_ns, the sender's name's length
MAX_NAME = 255
DEFAULT_PER_S = 50.0  # a link without a rate: 50 probes of ~70 bytes a second, 28 kbit/s
MAX_SHARE = 0.01  # of a link's configured capacity
# What a probe takes on the wire beyond its UDP payload: UDP 8, IPv4 20, Ethernet 14 + FCS 4.
WIRE_OVERHEAD = 46
PORTS = range(16_384, 32_768)  # below Linux's ephemeral ports (32768 on), so no socket of chance holds one
POLL_S = 0.05  # the longest the thread sleeps without looking at its stop
STOP_S = 5.0  # a stats read (nft and tc, each a process) under way finishes first
STATS_S = 0.5  # how often the backends' counters are read, in a thread of their own
USER_PATH_THREADS = "netspec-links-q"  # the user-space path's threads' names begin so (links/nfqueue.py)
_TICKS = os.sysconf("SC_CLK_TCK")


def user_path_cpu_s() -> float | None:
    """The CPU seconds the user-space path's threads in this process used so far (None: it
    has none running), from /proc/self/task/<tid>/stat."""
    total, found = 0.0, False
    for thread in threading.enumerate():
        if thread.name.startswith(USER_PATH_THREADS) and thread.native_id is not None:
            try:
                stat = Path(f"/proc/self/task/{thread.native_id}/stat").read_text()
                fields = stat.rpartition(")")[2].split()
            except OSError:
                continue  # ended since
            total += (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
            found = True
    return total if found else None
RECV_BATCH = 64  # datagrams read per wake at most, so sends stay on time under a flood
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # = SCM_TIMESTAMPNS, linux/asm-generic/socket.h
_TIMESPEC = struct.Struct("=qq")
ANCILLARY_SIZE = 64


def enable_stamps(sock: socket.socket) -> bool:
    """Ask the kernel for each datagram's receive stamp (CLOCK_REALTIME, ns); False if it will not."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def rx_stamp(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The kernel's receive time of a datagram, from recvmsg's ancillary data."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return sec * 1_000_000_000 + nsec
    return None


@dataclass(frozen=True)
class Target:
    """A peer this host has a link to: its name, its address, the link's configured rate in
    bit/s (None: no rate)."""

    host: str
    address: str
    rate_bps: float | None = None


def probe_size(host: str) -> int:
    """The UDP payload of a probe sent by `host`."""
    return _HEAD.size + len(host.encode())


def probes_per_s(rate_bps: float | None, size: int, default: float = DEFAULT_PER_S) -> float:
    """How many probes a second a link of `rate_bps` gets: `default`, but at most MAX_SHARE of
    its capacity with probes of `size` bytes of payload."""
    if rate_bps is None:
        return default
    return min(default, MAX_SHARE * rate_bps / ((size + WIRE_OVERHEAD) * 8))


def probe_port(run_id: str) -> int:
    """The UDP port every host of run `run_id` takes its peers' probes on: known to all
    without a message, and apart for two runs on one host (each in 16,384 ports)."""
    return PORTS.start + int.from_bytes(run_tag(run_id)[:4], "big") % len(PORTS)


def run_tag(run_id: str) -> bytes:
    """The 8 bytes every probe of run `run_id` carries; a probe of another run is refused."""
    return hashlib.blake2b(run_id.encode(), digest_size=8).digest()


class LinkProbes:
    """One host's probes during a run. Lifecycle: `open` (binds the port, which the peers'
    probes come to), `start` once with the targets, `close` (or leave the `with` block),
    which stops the thread and joins it within STOP_S. The run's NodeServices owns it.

    Counts for the record: `sent`, `received`, `refused` (not a probe of this run: another
    run's, garbled, too short), `send_errors` (the kernel refused the send: a partition's
    DROP on OUTPUT says EPERM; the probe counts as sent, and lost)."""

    def __init__(self, streams: Datastreams, host: str, run_id: str, default_per_s: float = DEFAULT_PER_S,
                 stats: Callable[[], msgspec.Struct] | None = None):
        if len(host.encode()) > MAX_NAME:
            raise NetspecError(f"links: host name {host[:40]!r}... too long for a probe")
        self.host, self.tag, self.default_per_s = host, run_tag(run_id), default_per_s
        self._probe = streams.event("LINKS", "probe",
                                    "a probe received: ProbeRecord, at its kernel receive stamp")
        self._sent = streams.event("LINKS", "sent", "a probe sent: SentRecord, at its send stamp")
        self._stats = streams.event("LINKS", "stats", "the backends' counters: protocol.links.LinkStats")
        self._counts = streams.event("LINKS", "counts", "the probes' counts at the end: sent, received, "
                                     "refused (not this run's probes), send_errors")
        self._user_cpu = streams.event("LINKS", "user_cpu",
                                       "CPU seconds the user-space path's threads used so far")
        self._stats_failed = streams.event("LINKS", "stats_failed",
                                           "the backends' counters could not be read")
        self._tcp_absent = streams.event("LINKS", "tcp_absent",
                                         "this host takes no TCP probes: why (its port is taken)")
        self.tcp = TcpProbes(streams, self.tag)  # beside the datagrams, on the same port number
        self.read_stats = stats
        self.stats_thread: threading.Thread | None = None
        self.sock: socket.socket | None = None
        self.port = 0
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.sent = self.received = self.refused = self.send_errors = 0
        self.rates: dict[str, float] = {}
        self.targets: dict[str, Target] = {}
        self._aiming = threading.Lock()

    def __enter__(self) -> LinkProbes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self, address: str = "0.0.0.0", port: int = 0) -> int:
        """Bind the probes' UDP socket on (address, port); the port bound."""
        if self.sock is not None:
            raise NetspecError("links: the probes' socket is already open")
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.bind((address, port))
            sock.setblocking(False)
            enable_stamps(sock)  # where the kernel will not, `_receive` stamps in user space
        except BaseException:
            sock.close()
            raise
        self.sock, self.port = sock, sock.getsockname()[1]
        try:
            self.tcp.open(address, self.port)
        except OSError as exc:  # said, and the audit's TCP rows then stay empty: not fatal
            self._tcp_absent.log(0, f"TCP port {self.port}: {exc}")
        return self.port

    def start(self, targets: list[Target], port: int) -> None:
        """Probe each target's `port` from now until `close`, each at its own rate."""
        if self.sock is None:
            raise NetspecError("links: probes started before their socket was opened")
        if self.thread is not None:
            raise NetspecError("links: probes are already running on this host for this run")
        self.aim(targets)
        self.thread = threading.Thread(target=self._loop, args=(port, probe_size(self.host)),
                                       name="link-probes", daemon=True)
        self.thread.start()
        if self.tcp.listener is not None:
            self.tcp.start(self._tcp_targets, port)
        if self.read_stats is not None:
            # Apart from the sends: a read runs nft and tc, tens of ms that would bunch them.
            self.stats_thread = threading.Thread(target=self._read_stats, name="link-stats", daemon=True)
            self.stats_thread.start()

    def _read_stats(self) -> None:
        assert self.read_stats is not None
        said = False
        while True:
            try:
                if self.targets:  # a host no link starts at has no counters to read
                    self._stats.log(0, msgspec.to_builtins(self.read_stats()))
                    cpu = user_path_cpu_s()
                    if cpu is not None:
                        self._user_cpu.log(0, cpu)
            except Exception as exc:  # said once in the stream; the audit then has no counters
                if not said:
                    self._stats_failed.log(0, f"{type(exc).__name__}: {exc}")
                    said = True
            if self.stopping.wait(STATS_S):
                return

    def aim(self, targets: list[Target]) -> None:
        """Probe these targets too, or at their new rates (a step changed their links)."""
        size = probe_size(self.host)
        with self._aiming:
            for t in targets:
                self.targets[t.host] = t
                self.rates[t.host] = probes_per_s(t.rate_bps, size, self.default_per_s)

    def _tcp_targets(self) -> dict[str, tuple[str, float | None]]:
        with self._aiming:
            return {t.host: (t.address, t.rate_bps) for t in self.targets.values()}

    def _gap(self, host: str) -> float:
        rate = self.rates[host]
        return random.expovariate(rate) if rate > 0 else float("inf")

    def _loop(self, port: int, size: int) -> None:
        sock = self.sock
        assert sock is not None
        name = self.host.encode()
        seq: dict[str, int] = {}
        due: dict[str, float] = {}
        while not self.stopping.is_set():
            with self._aiming:
                targets = list(self.targets.values())
                for t in targets:
                    if t.host not in due:
                        seq[t.host], due[t.host] = 0, time.monotonic() + self._gap(t.host)
            wait = min([POLL_S, *(d - time.monotonic() for d in due.values())])
            if wait > 0 and select.select([sock], [], [], wait)[0]:
                self._receive(sock)
            now = time.monotonic()
            for t in targets:
                if due[t.host] > now:
                    continue
                n = seq[t.host] = seq[t.host] + 1
                sent_ns = time.time_ns()
                self._sent.log(n, msgspec.to_builtins(SentRecord(t.host, n, sent_ns, size)),
                               clock=lambda s=sent_ns: s)
                self.sent += 1
                try:
                    sock.sendto(_HEAD.pack(MAGIC, self.tag, n, sent_ns, len(name)) + name, (t.address, port))
                except OSError:
                    self.send_errors += 1  # dropped at this host (a partition): lost, as sent
                due[t.host] = now + self._gap(t.host)

    def _receive(self, sock: socket.socket) -> None:
        for _ in range(RECV_BATCH):
            try:
                data, ancillary, _, _ = sock.recvmsg(_HEAD.size + MAX_NAME, ANCILLARY_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.refused += 1  # an ICMP error queued on the socket (a peer not yet listening)
                continue
            recv_ns = rx_stamp(ancillary) or time.time_ns()
            if len(data) < _HEAD.size:
                self.refused += 1
                continue
            magic, tag, seq, sent_ns, length = _HEAD.unpack_from(data)
            src = data[_HEAD.size:_HEAD.size + length]
            if magic != MAGIC or tag != self.tag or len(src) != length or sent_ns < 0:
                self.refused += 1
                continue
            try:
                record = ProbeRecord(src.decode(), self.host, seq, sent_ns, recv_ns, len(data))
            except UnicodeDecodeError:
                self.refused += 1
                continue
            self.received += 1
            self._probe.log(seq, msgspec.to_builtins(record), clock=lambda r=recv_ns: r)

    def close(self) -> None:
        """Stop the thread, join it and close the socket. Idempotent.

        Raises:
            NetspecError: the thread did not end within STOP_S (its socket is left to it).
        """
        self.stopping.set()
        late = self.tcp.close()
        for thread in (self.thread, self.stats_thread):
            if thread is not None:
                thread.join(STOP_S)
                if thread.is_alive():
                    late.append(thread.name)
        if late:
            raise NetspecError(f"links: the {', '.join(late)} thread(s) did not end within {STOP_S:g} s "
                               "of their stop")
        if self.thread is not None:  # said once, for the audit to say what was refused
            self._counts.log(0, msgspec.to_builtins(ProbeCounts(
                self.sent, self.received, self.refused, self.send_errors, self.tcp.probed, self.tcp.failed,
                self.tcp.refused)))
            self.thread = None
        if self.sock is not None:
            self.sock.close()
