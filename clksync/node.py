"""clksync on one host during a run, as a node service of netspecd: the probe server on the
reference host or the probe client elsewhere, in a thread of its own; the clock watch;
and the records they leave in the host's `clksync` stream.

Records (group CLKSYNC): `exchange` (a sample per exchange: peer, seq, kernel, t1..t4,
u1..u4), `change` (a clock step or rate change, which starts a new fit segment),
`estimate` (the online offset and bound, once a second) and `served` (the server's
answered and refused counts, once a second).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable

from netspec.datastream.instrument import Datastreams
from netspec.protocol.errors import NetspecError

from .client import EXCHANGE_TIMEOUT_S, VOLLEY, Exchange, ProbeClient
from .gate import Estimate, Gate
from .server import ProbeServer
from .watch import ClockChange, ClockWatch

EXCHANGE_FIELDS = ("peer", "seq", "kernel", "t1", "t2", "t3", "t4", "u1", "u2", "u3", "u4")
REPORT_EVERY_NS = 1_000_000_000
RETRY_S = 1.0  # after a volley that got no exchange through
SERVER_POLL_S = 0.05
GATE_POLL_S = 0.05
# How long `close` waits for the thread: it looks at its stop between two volleys (or
# server polls), so it ends within one unanswered volley, and its socket with it.
STOP_S = VOLLEY * EXCHANGE_TIMEOUT_S + 1.0


class ClockService:
    """Lifecycle: `serve` or `probe` once, `estimate`/`within` at any time, `close` (or
    leave a `with` block), which stops the thread and joins it within STOP_S: after it no
    thread, socket or timerfd of the service is left. The run's NodeServices owns it."""

    def __init__(self, streams: Datastreams):
        self._exchange = streams.samples("CLKSYNC", "exchange", EXCHANGE_FIELDS,
                                         "one probe exchange; t1..t4 in ns, kernel or user stamps")
        self._change = streams.event("CLKSYNC", "change", "CLOCK_REALTIME stepped or changed rate")
        self._estimate = streams.samples("CLKSYNC", "estimate",
                                         ("offset_ns", "bound_ns", "exchanges", "lost"),
                                         "the online offset from the reference and its bound")
        self._served = streams.samples("CLKSYNC", "served", ("answered", "refused"),
                                       "the probe server's answers so far")
        self.reference = False
        self.gate = Gate()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.watch: ClockWatch | None = None
        # What probing went through, for a host that gets no estimate to say why.
        self.volleys = self.unanswered = self.changes = 0

    def _check_idle(self) -> None:
        # Before a socket is made: a second serve or probe must not leave one behind.
        if self.thread is not None:
            raise NetspecError("clksync is already running on this host for this run")

    def __enter__(self) -> ClockService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, loop: Callable[[], None], sock: ProbeServer | ProbeClient) -> None:
        try:
            self.watch = ClockWatch(self._on_change)
            self.thread = threading.Thread(target=loop, name="clksync", daemon=True)
            self.thread.start()
        except BaseException:
            sock.close()  # the thread that would have closed it never ran
            self.thread = None
            if self.watch is not None:
                self.watch.close()
            raise

    def _on_change(self, change: ClockChange) -> None:
        self.changes += 1
        self._change.log(0, {"kind": change.kind, "raw_ns": change.raw_ns, "jump_ns": change.jump_ns,
                             "ppm_before": change.ppm_before, "ppm_after": change.ppm_after})
        with self.lock:
            self.gate.reset()

    def serve(self, address: str, key: bytes, kernel: bool = True) -> int:
        """Answer probes signed with `key` on `address`; the port they should go to."""
        self._check_idle()
        server = ProbeServer(address, key, kernel)
        self.reference = True

        def loop() -> None:
            checked = reported = 0
            try:
                while not self.stopping.is_set():
                    server.handle(SERVER_POLL_S)
                    now = time.monotonic_ns()
                    # As often as an idle server looks, not at every request: a busy
                    # reference would spend 5 us an exchange reading its clocks.
                    if now - checked >= SERVER_POLL_S * 1e9:
                        checked = now
                        self.watch.check()
                    if now - reported > REPORT_EVERY_NS:
                        reported = now
                        self._served.log((server.answered, server.refused))
            finally:
                server.close()
        self._start(loop, server)
        return server.port

    def probe(self, peer: str, address: str, port: int, key: bytes, interval_s: float,
              kernel: bool = True) -> None:
        """Probe the server at (address, port) on host `peer` with a volley of exchanges
        about every `interval_s`, at random instants so that probing never keeps step with
        a periodic workload."""
        self._check_idle()
        client = ProbeClient(address, port, key, kernel)

        def loop() -> None:
            reported = 0
            # The hosts' first volleys spread over one interval, not all at the reference at once.
            wait, empty = interval_s * random.uniform(0.0, 1.0), 0
            try:
                while not self.stopping.wait(wait):
                    volley = client.volley()
                    self.volleys, self.unanswered = self.volleys + 1, client.lost
                    # A volley that got nothing through (the reference busy, a datagram lost)
                    # is tried again soon: with a fleet's stretched interval, waiting a whole
                    # one could leave a host without an estimate for all of sync_clocks. The
                    # retries back off, doubling, so that a reference too busy to answer is
                    # not flooded by every host at once.
                    empty = 0 if volley else empty + 1
                    wait = min(interval_s, RETRY_S * 2 ** (empty - 1) if empty else interval_s)
                    wait *= random.uniform(0.5, 1.5)
                    if self.watch.check() or not volley:
                        continue  # exchanges that may span a clock change say nothing
                    for ex in volley:
                        self._log(peer, ex)
                    if volley[-1].t4 - reported > REPORT_EVERY_NS:
                        reported = volley[-1].t4
                        est = self.estimate()
                        if est is not None:
                            self._estimate.log((est.offset_ns, est.bound_ns, est.exchanges, client.lost))
            finally:
                client.close()
        self._start(loop, client)

    def _log(self, peer: str, ex: Exchange) -> None:
        self._exchange.log((peer, ex.seq, ex.kernel, ex.t1, ex.t2, ex.t3, ex.t4,
                            ex.u1, ex.u2, ex.u3, ex.u4), ex.u4)
        with self.lock:
            self.gate.add(ex)

    def estimate(self, now_ns: int | None = None) -> Estimate | None:
        """This host's offset from the reference at `now_ns` (default: now); None until
        enough exchanges came. The reference, and the one host of a run without clksync,
        are the reference clock."""
        if self.reference or self.thread is None:
            return Estimate(0, 0, 0, "reference")
        with self.lock:
            return self.gate.estimate(now_ns)

    async def within(self, bound_ns: int | None, wait_s: float) -> Estimate:
        """Wait until the bound is at most `bound_ns` (or, with None, until there is any
        estimate); fail after `wait_s` saying how far it got."""
        give_up = time.monotonic() + wait_s
        while True:
            est = self.estimate()
            if est is not None and (bound_ns is None or est.bound_ns <= bound_ns):
                return est
            if time.monotonic() >= give_up:
                asked = f"the {bound_ns / 1e3:g} us asked for" if bound_ns is not None else "any bound"
                if est is None:
                    raise NetspecError(f"no clock estimate after {wait_s:.1f} s ({len(self.gate.recent)} "
                                       f"exchanges; {self.volleys} volleys sent, {self.unanswered} "
                                       f"exchanges unanswered, {self.changes} clock changes seen), "
                                       f"short of {asked}")
                raise NetspecError(f"clock bound {est.bound_ns / 1e3:.1f} us above {asked} after "
                                   f"{wait_s:.1f} s (offset {est.offset_ns / 1e3:+.1f} us, "
                                   f"{est.exchanges} recent exchanges, {est.source} timestamps)")
            await asyncio.sleep(GATE_POLL_S)

    def close(self) -> None:
        """Stop the thread and join it, then release the clock watch. Idempotent.

        Raises:
            NetspecError: the thread did not end within STOP_S (what it holds is left
                to it rather than closed under it).
        """
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(STOP_S)
            if self.thread.is_alive():
                raise NetspecError(f"clksync: its thread did not end within {STOP_S:g} s of being stopped")
        if self.watch is not None:
            self.watch.close()
            self.watch = None
