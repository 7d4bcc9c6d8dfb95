"""A UDP echo server that stalls, and a client that loads it open- or closed-loop.

`--role server` (params `stall_ms`, `every_s`): in phase `listen` it binds and publishes its
address; from then on it echoes each request at once, but once every `every_s` it stops
answering for `stall_ms` (each stall a LOAD/stall interval): requests wait in its socket.

`--role client` (params `rate`, `arrivals`, `duration_s`, `seed`: nodelib.Pacer's;
`timeout_ms`): in each phase it is in, it sends requests for `duration_s` and logs each as
a LOAD/request operation. Open loop (`arrivals: constant` or `poisson`), a sender issues each
request at its pacer's instant, however many are unanswered, and a receiver ends each as
its reply comes, its latency from the intended instant; closed loop (`arrivals: closed`),
the one thread sends a request and waits for its reply before the next. A request without
a reply within `timeout_ms` is timed out. Every latency also goes to a log histogram
(LOAD/latency_ns, 1 % relative error) flushed at the phase's end.
"""

from __future__ import annotations

import argparse
import collections
import socket
import threading
import time

from netspec import nodelib

REQUEST = nodelib.operation("LOAD", "request", "a request to the server and its echo")
LATENCY = nodelib.histogram("LOAD", "latency_ns", 1_000, 100_000_000_000, relative_error=0.01,
                            desc="every answered request's latency, ns from its intended instant")
STALL = nodelib.interval("LOAD", "stall", "the server answers nothing")


class Server:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def listen(self, ctx: nodelib.PhaseContext) -> str:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)  # a stall's requests wait here
        sock.bind((ctx.host_address, 0))
        address, port = sock.getsockname()
        ctx.publish(address=address, port=port)
        stall, every = float(ctx.params.get("stall_ms", 200)) / 1e3, float(ctx.params.get("every_s", 1.0))
        self.thread = threading.Thread(target=self._serve, args=(sock, stall, every), daemon=True)
        self.thread.start()
        return f"echoing on {address}:{port}, stalling {stall * 1e3:g} ms every {every:g} s"

    def _serve(self, sock: socket.socket, stall: float, every: float) -> None:
        sock.settimeout(0.01)
        next_stall = time.monotonic() + every
        with sock:
            while not self.stop.is_set():
                if time.monotonic() >= next_stall:
                    began = STALL.start()
                    time.sleep(stall)
                    STALL.end(0, began)
                    next_stall += every
                try:
                    data, peer = sock.recvfrom(64)
                except TimeoutError:
                    continue
                sock.sendto(data, peer)


def client_phase(ctx: nodelib.PhaseContext) -> str:
    pacer = nodelib.Pacer.from_params(ctx.params)
    timeout_ns = int(float(ctx.params.get("timeout_ms", 1000)) * 1e6)
    server = (ctx.lookup("server", "address"), ctx.lookup("server", "port"))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.connect(server)
    with sock:
        if pacer.open_loop:
            answered, timed_out = _open_loop(pacer, sock, timeout_ns)
        else:
            answered, timed_out = _closed_loop(pacer, sock, timeout_ns)
    LATENCY.flush()
    if pacer.fell_behind:
        ctx.warn(pacer.behind())
    return f"{pacer.summary()}: {answered} answered, {timed_out} timed out"


def _closed_loop(pacer: nodelib.Pacer, sock: socket.socket, timeout_ns: int) -> tuple[int, int]:
    """Send, wait for the reply, then the next."""
    answered = timed_out = 0
    for seq, _ in enumerate(pacer):
        t = REQUEST.start()
        sock.send(seq.to_bytes(8, "big"))
        while True:  # a late reply to an earlier request is dropped
            sock.settimeout(max(1e-6, (t + timeout_ns - time.time_ns()) / 1e9))
            try:
                got = int.from_bytes(sock.recv(64)[:8], "big")
            except TimeoutError:
                REQUEST.timed_out(t, f"no reply in {timeout_ns / 1e6:g} ms")
                timed_out += 1
                break
            if got == seq:
                LATENCY.add(REQUEST.ok(t))
                answered += 1
                break
    return answered, timed_out


def _open_loop(pacer: nodelib.Pacer, sock: socket.socket, timeout_ns: int) -> tuple[int, int]:
    """A sender at the pacer's instants; a receiver ends each request as its reply comes."""
    # seq -> (intended, start), the oldest first
    pending: collections.OrderedDict[int, tuple[int, int]] = collections.OrderedDict()
    lock, sent_all = threading.Lock(), threading.Event()
    counts = {"answered": 0, "timed_out": 0}
    cause = f"no reply in {timeout_ns / 1e6:g} ms"

    def expire(now: int) -> None:
        with lock:
            while pending and (oldest := next(iter(pending.values())))[1] + timeout_ns < now:
                pending.popitem(last=False)
                REQUEST.timed_out(oldest[1], cause, oldest[0])
                counts["timed_out"] += 1

    def receive() -> None:
        sock.settimeout(0.05)
        while not (sent_all.is_set() and not pending):
            try:
                seq = int.from_bytes(sock.recv(64)[:8], "big")
            except TimeoutError:
                expire(time.time_ns())
                continue
            with lock:
                got = pending.pop(seq, None)  # None: a reply after its request timed out
                if got is not None:
                    LATENCY.add(REQUEST.ok(got[1], intended_ns=got[0]))
                    counts["answered"] += 1

    receiver = threading.Thread(target=receive, name="receiver")
    receiver.start()
    try:
        for seq, instant in enumerate(pacer):
            t = REQUEST.start()
            with lock:
                pending[seq] = (instant, t)
            sock.send(seq.to_bytes(8, "big"))
            expire(t)
    finally:
        sent_all.set()
        receiver.join(timeout=timeout_ns / 1e9 + 5)
    return counts["answered"], counts["timed_out"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=["server", "client"], required=True)
    if parser.parse_args().role == "server":
        server = Server()
        nodelib.register("listen", server.listen)
    else:
        nodelib.register("open", client_phase)
        nodelib.register("closed", client_phase)
    nodelib.run()


if __name__ == "__main__":
    main()
