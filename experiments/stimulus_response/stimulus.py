"""Stimulus-response (KU report, section 3.2), NETSPEC-aware.

The server listens in phase `listen` and publishes its address; the client sends `count`
stimuli of `size` bytes in phase `run`, one at a time, and records each round trip to
rtt.csv, which it hands back for collection. Each stimulus carries its sequence number,
and both sides log it to their streams (group STIM) tagged with it: the client's send
event and rtt interval, the server's stimulus and reply events, so analysis can pair a
send on one host with its arrival on the other.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time

from netspec import nodelib

SEND = nodelib.event("STIM", "send", "the client sends a stimulus")
STIMULUS = nodelib.event("STIM", "stimulus", "the server has read a whole stimulus")
REPLY = nodelib.event("STIM", "reply", "the server writes its reply")
RTT = nodelib.interval("STIM", "rtt", "from the client's send to the whole reply read back")
RTT_US = nodelib.histogram("STIM", "rtt_us", lo=0, hi=1000, buckets=100,
                           desc="round trips in microseconds")
ANSWERED = nodelib.counter("STIM", "answered", "stimuli the server answered")


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        part = conn.recv(size - len(data))
        if not part:
            raise ConnectionError("peer closed mid-message")
        data += part
    return data


class Server:
    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.answered = 0
        self.thread: threading.Thread | None = None

    def listen(self, ctx: nodelib.PhaseContext) -> str:
        # Listen where the other hosts reach this one: loopback for local daemons.
        bind = ctx.params.get("bind", ctx.host_address)
        self.sock = socket.create_server((bind, int(ctx.params.get("port", 0))))
        address, port = self.sock.getsockname()[:2]
        self.thread = threading.Thread(target=self._serve, args=(int(ctx.params.get("size", 64)),),
                                       daemon=True)
        self.thread.start()
        ctx.publish(address=address, port=port)
        return f"listening on {address}:{port}"

    def _serve(self, size: int) -> None:
        assert self.sock is not None
        conn, _ = self.sock.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                try:
                    stimulus = _recv_exactly(conn, size)
                    seq = int.from_bytes(stimulus[:8], "big")
                    STIMULUS.log(seq)
                    REPLY.log(seq)
                    conn.sendall(stimulus)
                except ConnectionError:
                    return
                self.answered += 1
                ANSWERED.add()

    def stop_logging(self, ctx: nodelib.PhaseContext) -> None:
        ANSWERED.log()

    def collect(self, ctx: nodelib.PhaseContext) -> str:
        if self.thread is not None:
            self.thread.join(timeout=5)
        return f"answered {self.answered} stimuli"


def client_run(ctx: nodelib.PhaseContext) -> str:
    count, size = int(ctx.params.get("count", 1000)), max(8, int(ctx.params.get("size", 64)))
    # `server` names whom to reach: the server itself, or a link emulator in front of it.
    server = ctx.params.get("server", "server")
    address = (ctx.lookup(server, "address"), ctx.lookup(server, "port"))
    rtts = []
    with socket.create_connection(address, timeout=10) as conn, open("rtt.csv", "w") as out:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        out.write("seq,sent_ns,rtt_ns\n")
        padding = bytes(size - 8)
        for seq in range(count):
            sent = time.time_ns()
            t0 = time.perf_counter_ns()
            SEND.log(seq)
            RTT.start()
            conn.sendall(seq.to_bytes(8, "big") + padding)
            _recv_exactly(conn, size)
            RTT.end(seq)
            rtt = time.perf_counter_ns() - t0
            RTT_US.add(rtt / 1e3)
            rtts.append(rtt)
            out.write(f"{seq},{sent},{rtt}\n")
    RTT_US.log()
    ctx.hand_back("rtt.csv")
    rtts.sort()
    p99 = rtts[min(len(rtts) - 1, int(0.99 * len(rtts)))]
    print(f"client: {count} round trips of {size} bytes to {address[0]}:{address[1]}")
    return (f"{count} round trips: median {statistics.median(rtts) / 1e3:.1f} us, "
            f"p99 {p99 / 1e3:.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=["server", "client"], required=True)
    role = parser.parse_args().role
    if role == "server":
        server = Server()
        nodelib.register("listen", server.listen)
        nodelib.register("stop_logging", server.stop_logging)
        nodelib.register("collect", server.collect)
    else:
        nodelib.register("run", client_run)
    nodelib.run()


if __name__ == "__main__":
    main()
