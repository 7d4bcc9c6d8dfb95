"""The KU report's distributed pipeline (section 3.3), NETSPEC-aware: `data_pipe`.

One program, three roles. The source sends `count` small messages, one every
`interval_ms`, to the first processing node; each node forwards every message to its
`next` component after `work_us` of simulated processing; the sink, on the source's host,
ends the loop. Every hop is logged to the PIPE group, tagged with the message's sequence
number: `send` just before a message leaves a process and `recv` once it has arrived
whole, so analysis pairs a send on one host with its receive on the next. The sink also
logs PIPE/e2e, the source-to-sink time, on its host's clock alone: the message carries
the source's send time and source and sink share a host.

Phases: listen (nodes and sink listen and publish where), connect (source and nodes
connect to `next`), run (the source sends; everyone acks once the end of the stream has
passed through it), collect.
"""

from __future__ import annotations

import argparse
import socket
import struct
import threading
import time

from netspec import nodelib

SEND = nodelib.event("PIPE", "send", "a message leaves this process")
RECV = nodelib.event("PIPE", "recv", "a message has arrived whole")
WORK = nodelib.interval("PIPE", "work", "a node's processing of one message")
E2E = nodelib.interval("PIPE", "e2e", "source send to sink receive, on the shared host clock")

HEADER = struct.Struct("!IQQ")  # length of the rest, sequence number, source send time (ns)


def _recv_exactly(conn: socket.socket, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        part = conn.recv(size - len(data))
        if not part:
            return None
        data += part
    return bytes(data)


def _busy(us: float) -> None:
    end = time.perf_counter_ns() + int(us * 1000)
    while time.perf_counter_ns() < end:
        pass


class Stage:
    def __init__(self, role: str) -> None:
        self.role = role
        self.listener: socket.socket | None = None
        self.downstream: socket.socket | None = None
        self.thread: threading.Thread | None = None
        self.passed = 0
        self.error: BaseException | None = None

    def listen(self, ctx: nodelib.PhaseContext) -> str:
        self.listener = socket.create_server((ctx.params.get("bind", ctx.host_address), 0))
        address, port = self.listener.getsockname()[:2]
        ctx.publish(address=address, port=port)
        self.thread = threading.Thread(target=self._serve, args=(float(ctx.params.get("work_us", 0)),),
                                       daemon=True)
        self.thread.start()
        return f"listening on {address}:{port}"

    def connect(self, ctx: nodelib.PhaseContext) -> str:
        target = ctx.params["next"]
        address = (ctx.lookup(target, "address"), ctx.lookup(target, "port"))
        self.downstream = socket.create_connection(address, timeout=10)
        self.downstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return f"connected to {target} at {address[0]}:{address[1]}"

    def _serve(self, work_us: float) -> None:
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with conn:
                while (header := _recv_exactly(conn, HEADER.size)) is not None:
                    size, seq, sent = HEADER.unpack(header)
                    body = _recv_exactly(conn, size - 16)
                    if body is None:
                        raise ConnectionError(f"stream cut inside message {seq}")
                    RECV.log(seq)
                    self.passed += 1
                    if self.role == "sink":
                        E2E.end(seq, sent)
                        continue
                    WORK.start()
                    _busy(work_us)
                    WORK.end(seq)
                    SEND.log(seq)
                    assert self.downstream is not None
                    self.downstream.sendall(header + body)
        except BaseException as exc:  # reported by `run`, in the phase's ack
            self.error = exc
        finally:
            if self.downstream is not None:
                self.downstream.close()  # the end of the stream goes on downstream

    def run(self, ctx: nodelib.PhaseContext) -> str:
        if self.role == "source":
            return self._send(ctx)
        assert self.thread is not None
        self.thread.join(timeout=float(ctx.params.get("timeout_s", 300)))
        if self.thread.is_alive():
            raise TimeoutError(f"the end of the stream did not arrive ({self.passed} messages so far)")
        if self.error is not None:
            raise self.error
        return f"{self.passed} messages passed"

    def _send(self, ctx: nodelib.PhaseContext) -> str:
        assert self.downstream is not None
        count = int(ctx.params.get("count", 1000))
        interval_ns = int(float(ctx.params.get("interval_ms", 1)) * 1e6)
        payload = bytes(int(ctx.params.get("size", 6)))
        started = next_at = time.monotonic_ns()
        for seq in range(count):
            sent = time.time_ns()
            SEND.log(seq)
            self.downstream.sendall(HEADER.pack(16 + len(payload), seq, sent) + payload)
            next_at += interval_ns
            pause = next_at - time.monotonic_ns()
            if pause > 0:
                time.sleep(pause / 1e9)
        self.downstream.close()
        return f"sent {count} messages in {(time.monotonic_ns() - started) / 1e9:.2f} s"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=["source", "node", "sink"], required=True)
    role = parser.parse_args().role
    stage = Stage(role)
    if role != "source":
        nodelib.register("listen", stage.listen)
    if role != "sink":
        nodelib.register("connect", stage.connect)
    nodelib.register("run", stage.run)
    nodelib.run()


if __name__ == "__main__":
    main()
