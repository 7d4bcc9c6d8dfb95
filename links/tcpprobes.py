"""The audit's TCP probes: beside the datagram probes (probes.py), a low-rate TCP exchange
from this host to each peer it has a link to, on the same port number, shaped as the link's
traffic is. A datagram crosses a link alone; TCP's cost depends on how the link treats a
flow (an emulation that keeps a packet charged to its socket made a request in two writes
cost three one-way delays and bulk TCP two segments a delay, while every datagram probe
was on time). Each probe:

- connects (its time: one round trip, the truth of the same instant);
- sends a request in two writes (TCP_NODELAY, as an HTTP client writes headers then body)
  and waits for the answer (one round trip on a real link);
- sends a burst of BURST bytes and waits for the peer's word that all arrived (a fresh
  connection's slow start: three round trips for BURST, and its serialisation at the rate).

The sender logs each as a `LINKS/tcp` event at its start, its data a `TcpProbeRecord`
(datastream/schema.py); analysis/links.py compares the step's fastest with what the link's
conditions imply. A probe that failed (a partition, a peer not listening yet) says why.

Probes go a Poisson process per peer, at most one every EVERY_S on average and at most
SHARE of the link's configured rate.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections.abc import Callable

import msgspec
from netspec.datastream.instrument import Datastreams
from netspec.datastream.schema import TcpProbeRecord

HALF = 64  # bytes of each of the request's two writes
ANSWER = 64  # bytes of the answer to the request
BURST = 65_536  # bytes of the burst: 46 segments of 1448, three round trips of a fresh slow start
DONE = b"DONE"  # the peer's word that the burst arrived whole
EVERY_S = 2.0  # a peer's probes: one every two seconds on average, at most
SHARE = 0.005  # of a link's configured rate
WIRE_BYTES = BURST + 2 * HALF + ANSWER + 80 * 66  # a probe on the wire: its data and ~80 headers
CONNECT_S = 3.0  # a probe's longest wait for each of its parts: past it, failed
SERVE_S = 10.0  # a peer's connection served this long at most
MAX_SERVED = 16  # connections served at once; more wait in the listener's backlog
POLL_S = 0.05
JOIN_S = 5.0


def per_s(rate_bps: float | None) -> float:
    """A link's TCP probes a second: 1/EVERY_S, at most SHARE of its rate."""
    if rate_bps is None:
        return 1 / EVERY_S
    return min(1 / EVERY_S, SHARE * rate_bps / (WIRE_BYTES * 8))


def _read(conn: socket.socket, size: int) -> bytes:
    got = b""
    while len(got) < size:
        chunk = conn.recv(size - len(got))
        if not chunk:
            raise ConnectionError(f"closed after {len(got)} of {size} bytes")
        got += chunk
    return got


class TcpProbes:
    """One host's TCP probes during a run: a listener its peers' probes come to, and a thread
    that probes each target. Lifecycle: `open` (binds the listener), `start` with a function
    that gives the targets (name -> address, rate) now, `close`, which stops both threads and
    every connection being served, and joins them within JOIN_S. LinkProbes owns it."""

    def __init__(self, streams: Datastreams, tag: bytes):
        self.tag = tag
        self._tcp = streams.event("LINKS", "tcp", "a TCP probe of a link: TcpProbeRecord, at its start")
        self.listener: socket.socket | None = None
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        # Every connection in use, by the thread using it: shut at close, which wakes its thread.
        self._open: dict[threading.Thread, socket.socket] = {}
        self._lock = threading.Lock()
        self.probed = self.failed = self.refused = 0

    def open(self, address: str, port: int) -> None:
        """Listen on TCP (address, port). Raises OSError: the port is taken."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((address, port))
            listener.listen(MAX_SERVED)
            listener.settimeout(POLL_S)
        except BaseException:
            listener.close()
            raise
        self.listener = listener

    def start(self, targets: Callable[[], dict[str, tuple[str, float | None]]], port: int) -> None:
        for name, work in (("link-tcp-serve", self._serve),
                           ("link-tcp-probe", lambda: self._probe(targets, port))):
            thread = threading.Thread(target=work, name=name, daemon=True)
            thread.start()
            self.threads.append(thread)

    def _serve(self) -> None:
        assert self.listener is not None
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                if len(self._open) > MAX_SERVED:
                    conn.close()
                    self.refused += 1
                    continue
                thread = threading.Thread(target=self._answer, args=(conn,), name="link-tcp-answer",
                                          daemon=True)
                self._open[thread] = conn
            thread.start()

    def _answer(self, conn: socket.socket) -> None:
        """One peer's probe: the request answered, the burst's arrival said."""
        try:
            with conn:
                conn.settimeout(SERVE_S)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                request = _read(conn, 2 * HALF)
                if request[:len(self.tag)] != self.tag:
                    self.refused += 1  # not this run's probe
                    return
                conn.sendall(bytes(ANSWER))
                _read(conn, BURST)
                conn.sendall(DONE)
        except OSError:
            pass  # the prober's to say: it times each part and records what failed
        finally:
            with self._lock:
                self._open.pop(threading.current_thread(), None)

    def _probe(self, targets: Callable[[], dict[str, tuple[str, float | None]]], port: int) -> None:
        due: dict[str, float] = {}
        while not self.stopping.wait(POLL_S):
            now = time.monotonic()
            for name, (address, rate_bps) in targets().items():
                rate = per_s(rate_bps)
                if name not in due:
                    due[name] = now + random.expovariate(rate)
                elif due[name] <= now and not self.stopping.is_set():
                    self._one(name, address, port)
                    due[name] = time.monotonic() + random.expovariate(rate)

    def _one(self, name: str, address: str, port: int) -> None:
        start_ns = time.time_ns()
        times: dict[str, int | None] = {"connect": None, "request": None, "burst": None}
        error = None
        try:
            began = time.perf_counter_ns()
            with socket.create_connection((address, port), timeout=CONNECT_S) as conn:
                times["connect"] = time.perf_counter_ns() - began
                with self._lock:
                    self._open[threading.current_thread()] = conn
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                first = self.tag + bytes(HALF - len(self.tag))
                began = time.perf_counter_ns()
                conn.send(first)
                conn.send(bytes(HALF))
                _read(conn, ANSWER)
                times["request"] = time.perf_counter_ns() - began
                began = time.perf_counter_ns()
                conn.sendall(bytes(BURST))
                if _read(conn, len(DONE)) != DONE:
                    raise ConnectionError("the peer's answer to the burst was not its word")
                times["burst"] = time.perf_counter_ns() - began
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc}"[:200]
            self.failed += 1
        finally:
            with self._lock:
                self._open.pop(threading.current_thread(), None)
        if self.stopping.is_set() and error is not None:
            return  # cut short by the close, not by the link
        self.probed += 1
        record = TcpProbeRecord(name, times["connect"], times["request"], times["burst"], BURST, error)
        self._tcp.log(self.probed, msgspec.to_builtins(record), clock=lambda s=start_ns: s)

    def close(self) -> list[str]:
        """Stop, close the listener and join every thread (JOIN_S each); the threads that did
        not end (their sockets time out on their own)."""
        self.stopping.set()
        if self.listener is not None:
            with contextlib.suppress(OSError):
                self.listener.close()
        with self._lock:
            served = list(self._open.items())
        for _, conn in served:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        late = []
        for thread in [*self.threads, *(t for t, _ in served)]:
            thread.join(JOIN_S)
            if thread.is_alive():
                late.append(thread.name)
        self.threads.clear()
        return late
