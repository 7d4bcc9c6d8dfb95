"""Competing network load in the manner of the KU report's ettcp (section 3.1), NETSPEC-aware.

A receiver listens (phase `listen`, TCP or UDP); a sender sends blocks of `block` bytes at
`rate_kbps` (0: as fast as it can) to the component named `to`, from the phase named
`start_in` (default run; the phase returns at once, the load goes on in the background)
until the phase named `stop_in` (default collect), or for `duration_s` (then `stop_in`
waits for it to end). The receiver stops once nothing has arrived for `linger_s` (0.3 s). Both log ETTCP/bytes
(a counter, logged every second) and the sender ETTCP/block per block sent; `stop_in`
acks with the throughput.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time

from netspec import nodelib

BLOCK = nodelib.event("ETTCP", "block", "a block was handed to the socket")
BYTES = nodelib.counter("ETTCP", "bytes", "bytes sent or received so far")


class Load:
    def __init__(self, params: dict) -> None:
        self.proto = params.get("proto", "tcp")
        self.block = int(params.get("block", 8192))
        self.rate_bps = float(params.get("rate_kbps", 0)) * 1000 / 8
        self.duration_s = float(params.get("duration_s", 0))
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.bytes = 0
        self.started = self.ended = 0.0

    def _finish(self) -> str:
        if self.duration_s and self.thread is not None:
            self.thread.join(timeout=self.duration_s + 10)  # a timed load runs its course
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=10)
        seconds = max((self.ended or time.monotonic()) - self.started, 1e-9)
        BYTES.log()
        return (f"{self.bytes / 1e6:.2f} MB in {seconds:.2f} s = "
                f"{self.bytes * 8 / seconds / 1e6:.2f} Mbit/s ({self.proto})")

    def _count(self, n: int, last_log: float) -> float:
        self.bytes += n
        BYTES.add(n)
        now = time.monotonic()
        if now - last_log >= 1:
            BYTES.log()
            return now
        return last_log


class Receiver(Load):
    def listen(self, ctx: nodelib.PhaseContext) -> str:
        kind = socket.SOCK_STREAM if self.proto == "tcp" else socket.SOCK_DGRAM
        self.sock = socket.socket(socket.AF_INET, kind)
        self.sock.bind((ctx.params.get("bind", ctx.host_address), 0))
        if self.proto == "tcp":
            self.sock.listen()
        self.sock.settimeout(0.2)
        address, port = self.sock.getsockname()
        ctx.publish(address=address, port=port, proto=self.proto)
        self.thread = threading.Thread(target=self._receive, daemon=True)
        self.thread.start()
        return f"receiving {self.proto} on {address}:{port}"

    def _receive(self) -> None:
        source, last = self.sock, time.monotonic()
        while not self.stop.is_set():
            try:
                if source is self.sock and self.proto == "tcp":
                    source, _ = self.sock.accept()
                    source.settimeout(0.2)
                    self.started = time.monotonic()
                    continue
                data = source.recv(1 << 16)
            except TimeoutError:
                continue
            if not data and self.proto == "tcp":
                break
            if not self.started:
                self.started = time.monotonic()
            self.ended = time.monotonic()
            last = self._count(len(data), last)

    def stop_phase(self, ctx: nodelib.PhaseContext) -> str:
        # What is still in flight arrives while the sender stops in the same step.
        linger = float(ctx.params.get("linger_s", 0.3))
        while time.monotonic() - (self.ended or self.started or time.monotonic()) < linger:
            time.sleep(0.05)
        return "received " + self._finish()


class Sender(Load):
    def start_phase(self, ctx: nodelib.PhaseContext) -> str:
        target = ctx.params["to"]
        address = (ctx.lookup(target, "address"), ctx.lookup(target, "port"))
        if self.proto == "tcp":
            self.sock = socket.create_connection(address, timeout=10)
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.sock.connect(address)
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.thread.start()
        rate = f"{self.rate_bps * 8 / 1000:g} kbit/s" if self.rate_bps else "full speed"
        return f"sending {self.block}-byte blocks to {target} at {address[0]}:{address[1]}, {rate}"

    def _send(self) -> None:
        payload, seq = bytes(self.block), 0
        self.started = last = time.monotonic()
        while not self.stop.is_set():
            now = time.monotonic()
            if self.duration_s and now - self.started >= self.duration_s:
                break
            if self.rate_bps and self.bytes > (now - self.started) * self.rate_bps:
                time.sleep(min(0.01, self.block / self.rate_bps))
                continue
            BLOCK.log(seq)
            try:
                self.sock.sendall(payload)
            except OSError:
                break  # the receiver went away: the load is over
            seq += 1
            last = self._count(self.block, last)
        self.ended = time.monotonic()
        self.sock.close()

    def stop_phase(self, ctx: nodelib.PhaseContext) -> str:
        return "sent " + self._finish()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=["sender", "receiver"], required=True)
    params = nodelib.component_params()
    if parser.parse_args().role == "receiver":
        receiver = Receiver(params)
        nodelib.register("listen", receiver.listen)
        nodelib.register(params.get("stop_in", "collect"), receiver.stop_phase)
    else:
        sender = Sender(params)
        nodelib.register(params.get("start_in", "run"), sender.start_phase)
        nodelib.register(params.get("stop_in", "collect"), sender.stop_phase)
    nodelib.run()


if __name__ == "__main__":
    main()
