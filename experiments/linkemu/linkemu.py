"""A link emulator component (NIST Net's role in the KU report, section 2.5), NETSPEC-aware.

Placed in front of a component that published `address` and `port`, it relays TCP or UDP
to it with `delay_ms` ± `jitter_ms` (uniform), `loss` (a fraction of UDP datagrams; TCP
never loses bytes), and a `rate_kbps` bottleneck, both ways. Clients look up the relay's
published address instead of the target's. Randomness comes from `seed`, so a run
repeats exactly.

Every packet (UDP datagram or TCP read) is logged: LINK/in on arrival, LINK/out when it
leaves with the time it was due as data, LINK/drop when lost. out minus due is the relay's
own scheduling delay, which analysis can tell apart from the emulated delay.

Where the kernel has tc netem, `mode: netem` (or `auto`) shapes the interface of this host
that routes to the target instead (all of its traffic there: opt in knowingly) and
publishes the target's own address; `auto` falls back to relaying where netem is missing
(as on the machine this was built on) and says so in the ack. The default is `relay`.

Phases: connect (look up `to`, start relaying, publish where), `stop_in` (default
collect: stop and ack with counts).
"""

from __future__ import annotations

import contextlib
import heapq
import random
import socket
import subprocess
import threading
import time
from dataclasses import dataclass

from netspec import nodelib

IN = nodelib.event("LINK", "in", "a packet reached the relay; data: [direction, bytes]")
OUT = nodelib.event("LINK", "out", "a packet left the relay; data: the time it was due (ns)")
DROP = nodelib.event("LINK", "drop", "a packet was lost on purpose")


@dataclass
class Shape:
    delay_ns: int
    jitter_ns: int
    loss: float
    rate_bps: float
    rng: random.Random

    def due(self, size: int, free_at: float, now: float) -> tuple[float, float]:
        """When a packet that arrives `now` (monotonic s) leaves, and when the link is free
        again after it: delay and jitter first, then the bottleneck's queue."""
        delay = max(0, self.delay_ns + self.rng.randint(-self.jitter_ns, self.jitter_ns)) / 1e9
        due = now + delay
        if self.rate_bps:
            due = max(due, free_at)
            free_at = due + size / self.rate_bps
        return due, free_at


class Scheduler:
    """One thread sends every packet at its due time. Threads, not asyncio: the event
    loop's timeouts are rounded up to whole milliseconds, which would add up to 1 ms to
    every emulated delay; a timed condition wait wakes within tens of microseconds."""

    def __init__(self) -> None:
        self.heap: list = []
        self.count = 0
        self.cond = threading.Condition()
        threading.Thread(target=self._run, daemon=True).start()

    def at(self, due: float, action) -> None:
        with self.cond:
            self.count += 1
            heapq.heappush(self.heap, (due, self.count, action))
            self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.heap or (wait := self.heap[0][0] - time.monotonic()) > 0:
                    self.cond.wait(None if not self.heap else wait)
                _, _, action = heapq.heappop(self.heap)
            action()


class Relay:
    def __init__(self, params: dict) -> None:
        self.proto = params.get("proto", "tcp")
        self.mode = params.get("mode", "relay")
        self.shape = Shape(int(float(params.get("delay_ms", 0)) * 1e6),
                           int(float(params.get("jitter_ms", 0)) * 1e6), float(params.get("loss", 0)),
                           float(params.get("rate_kbps", 0)) * 1000 / 8, random.Random(params.get("seed", 1)))
        self.seq = self.relayed = self.dropped = 0
        self.lock = threading.Lock()
        self.free_at = [0.0, 0.0]  # per direction: 0 towards the target, 1 back
        self.last_due: dict[object, float] = {}  # per TCP pipe: order is kept
        self.scheduler: Scheduler | None = None
        self.netem_device: str | None = None
        self.sockets: list[socket.socket] = []

    def connect(self, ctx: nodelib.PhaseContext) -> str:
        target = (ctx.lookup(ctx.params["to"], "address"), ctx.lookup(ctx.params["to"], "port"))
        note = ""
        if self.mode in ("auto", "netem"):
            failure = self._netem(target[0])
            if failure is None:
                ctx.publish(address=target[0], port=target[1])
                return f"tc netem on {self.netem_device} towards {target[0]}"
            if self.mode == "netem":
                raise RuntimeError(f"tc netem unavailable: {failure}")
            note = f" (tc netem unavailable: {failure}; relaying in user space)"
        self.scheduler = Scheduler()
        kind = socket.SOCK_STREAM if self.proto == "tcp" else socket.SOCK_DGRAM
        front = socket.socket(socket.AF_INET, kind)
        front.bind((ctx.params.get("bind", ctx.host_address), 0))
        self.sockets.append(front)
        if self.proto == "tcp":
            front.listen()
            _thread(self._accept, front, target)
        else:
            _thread(self._udp_front, front, target)
        address, port = front.getsockname()
        ctx.publish(address=address, port=port)
        return f"relaying {self.proto} {address}:{port} -> {target[0]}:{target[1]}{note}"

    def _netem(self, towards: str) -> str | None:
        """Shape the interface that routes to `towards` with netem; why not, if it fails."""
        try:
            route = subprocess.run(["ip", "route", "get", towards], capture_output=True, text=True,
                                   check=True).stdout.split()
            self.netem_device = route[route.index("dev") + 1]
            s = self.shape
            spec = ["delay", f"{s.delay_ns // 1000}us", f"{s.jitter_ns // 1000}us", "loss",
                    f"{s.loss * 100:g}%"] + (["rate", f"{s.rate_bps * 8 / 1000:g}kbit"] if s.rate_bps else [])
            done = subprocess.run(["tc", "qdisc", "replace", "dev", self.netem_device, "root",
                                   "netem", *spec], capture_output=True, text=True)
        except (OSError, subprocess.CalledProcessError, ValueError, IndexError) as exc:
            return str(exc)
        if done.returncode:
            self.netem_device = None
            return done.stderr.strip() or f"tc exited {done.returncode}"
        return None

    def _pass(self, direction: int, data: bytes, send, pipe: object = None) -> None:
        """Log an arrival and send it when due, or drop it as the emulated link says."""
        with self.lock:
            self.seq += 1
            seq = self.seq
            IN.log(seq, [direction, len(data)])
            if self.proto == "udp" and self.shape.loss and self.shape.rng.random() < self.shape.loss:
                self.dropped += 1
                DROP.log(seq)
                return
            now = time.monotonic()
            due, self.free_at[direction] = self.shape.due(len(data), self.free_at[direction], now)
            if pipe is not None:
                due = self.last_due[pipe] = max(due, self.last_due.get(pipe, 0.0))
            due_ns = time.time_ns() + int((due - now) * 1e9)

        def leave() -> None:
            try:
                send(data)
            except OSError:
                return  # that side has gone: nothing left to deliver to
            self.relayed += 1
            OUT.log(seq, due_ns)
        assert self.scheduler is not None
        self.scheduler.at(due, leave)

    def _accept(self, front: socket.socket, target: tuple[str, int]) -> None:
        while True:
            try:
                client, _ = front.accept()
            except OSError:
                return
            upstream = socket.create_connection(target)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sockets += [client, upstream]
            _thread(self._tcp_pipe, client, upstream, 0)
            _thread(self._tcp_pipe, upstream, client, 1)

    def _tcp_pipe(self, src: socket.socket, dst: socket.socket, direction: int) -> None:
        pipe = (id(src), direction)
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                self._pass(direction, data, dst.sendall, pipe)
        # The end of the stream follows the last data, after its delay.
        self._pass(direction, b"", lambda _: dst.shutdown(socket.SHUT_WR), pipe)

    def _udp_front(self, front: socket.socket, target: tuple[str, int]) -> None:
        upstreams: dict[tuple, socket.socket] = {}
        while True:
            try:
                data, client = front.recvfrom(65536)
            except OSError:
                return
            upstream = upstreams.get(client)
            if upstream is None:
                # One upstream socket per client, so that the target's replies find it.
                upstream = upstreams[client] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                upstream.connect(target)
                self.sockets.append(upstream)
                _thread(self._udp_back, upstream, front, client)
            self._pass(0, data, upstream.send)

    def _udp_back(self, upstream: socket.socket, front: socket.socket, client: tuple) -> None:
        while True:
            try:
                data = upstream.recv(65536)
            except OSError:
                return
            self._pass(1, data, lambda d, c=client: front.sendto(d, c))

    def stop(self, ctx: nodelib.PhaseContext) -> str:
        if self.netem_device is not None:
            subprocess.run(["tc", "qdisc", "del", "dev", self.netem_device, "root"], capture_output=True)
            return f"removed tc netem from {self.netem_device}"
        for sock in self.sockets:
            sock.close()
        return f"{self.seq} packets in, {self.relayed} relayed, {self.dropped} dropped"


def _thread(target, *args) -> None:
    threading.Thread(target=target, args=args, daemon=True).start()


def main() -> None:
    params = nodelib.component_params()
    relay = Relay(params)
    nodelib.register("connect", relay.connect)
    nodelib.register(params.get("stop_in", "collect"), relay.stop)
    nodelib.run()


if __name__ == "__main__":
    main()
