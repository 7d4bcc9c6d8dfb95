"""clksync's cost per exchange on loopback: the probe server's CPU (what the reference host
pays for each exchange any host makes) and the client's, with kernel timestamps.

The server runs in a forked process answering `--exchanges` exchanges from a ProbeClient
here, in volleys as a host sends them (clksync.client.VOLLEY, 12 ms apart, below the
server's per-peer rate). Baseline, measured in the same run: a bare UDP echo in a forked
process answering the same number of datagrams (a recv and a send each, no stamps, no
tag), against which the server's CPU is also printed as a ratio.

Prints figures for people, then one JSON object as the last line.

    python bench/probecost.py [--exchanges 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time

from netspec.clksync.client import VOLLEY, ProbeClient
from netspec.clksync.packets import KEY_BYTES, REQUEST_SIZE
from netspec.clksync.server import ProbeServer

GAP_S = 0.012


def _serve(answer_one, count: int, out: int) -> None:
    """In a forked child: answer `count` times, then write this thread's CPU an answer, in us."""
    started = time.thread_time()
    for _ in range(count):
        answer_one()
    os.write(out, f"{(time.thread_time() - started) / count * 1e6:.3f}\n".encode())


def _forked(make, count: int) -> tuple[int, int, int]:
    """Fork a child that builds its server with `make` (returning its port and a function that
    answers once) and answers `count` times; (pid, port, the pipe its figure comes on)."""
    ports, figures = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:
        port, answer_one = make()
        os.write(ports[1], f"{port}\n".encode())
        _serve(answer_one, count, figures[1])
        os._exit(0)
    os.close(ports[1])
    os.close(figures[1])
    port = int(os.read(ports[0], 16))
    os.close(ports[0])
    return pid, port, figures[0]


def _figure(pid: int, pipe: int) -> float:
    with os.fdopen(pipe) as f:
        value = float(f.read())
    os.waitpid(pid, 0)
    return value


def probe_server(count: int) -> tuple[float, float]:
    """(server CPU, client CPU) an exchange, in us."""
    key = os.urandom(KEY_BYTES)

    def make():
        server = ProbeServer("127.0.0.1", key)

        def answer_one() -> None:
            answered = server.answered
            while server.answered == answered:
                server.handle(1.0)
        return server.port, answer_one
    pid, port, pipe = _forked(make, count)
    client = ProbeClient("127.0.0.1", port, key)
    started, done = time.thread_time(), 0
    while done < count:
        done += len(client.volley(min(VOLLEY, count - done)))
        time.sleep(GAP_S)
    client_us = (time.thread_time() - started) / count * 1e6
    client.close()
    return _figure(pid, pipe), client_us


def udp_echo(count: int) -> float:
    """A bare UDP echo's CPU a datagram, in us."""
    def make():
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(("127.0.0.1", 0))

        def answer_one() -> None:
            data, peer = sock.recvfrom(REQUEST_SIZE)
            sock.sendto(data, peer)
        return sock.getsockname()[1], answer_one
    pid, port, pipe = _forked(make, count)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("127.0.0.1", port))
        for k in range(count):
            sock.send(bytes(REQUEST_SIZE))
            sock.recv(REQUEST_SIZE)
            if k % VOLLEY == VOLLEY - 1:
                time.sleep(GAP_S)
    return _figure(pid, pipe)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=2000)
    args = parser.parse_args()
    echo = udp_echo(args.exchanges)
    server, client = probe_server(args.exchanges)
    print(f"baseline: bare UDP echo, {echo:.1f} us of CPU a datagram")
    print(f"clksync, {args.exchanges} exchanges: server {server:.1f} us an exchange "
          f"({server / echo:.1f}x the echo), client {client:.1f} us an exchange")
    print(json.dumps({"exchanges": args.exchanges, "echo_us": round(echo, 1), "server_us": round(server, 1),
                      "client_us": round(client, 1), "server_over_echo": round(server / echo, 2)}))


if __name__ == "__main__":
    main()
