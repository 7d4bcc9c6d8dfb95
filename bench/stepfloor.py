"""The machine's own floor for a flat barrier step: one process sends a byte to each of N
processes over loopback TCP and waits until each has sent one back, as netspec's controller
sends an enter to every daemon and waits for its ack, without anything of netspec's around it:
no framing, MAC, msgpack, event loop or journal. Each of the N is a bare Python loop in
blocking recv and send.

With `--native`, each of the N is instead a compiled C loop (bench/echo.c, built with the
machine's cc): the floor of a step path whose per-message work is not Python's.

With `--sealed`, each byte is instead one of netspec's frames (wire.py: msgpack, each
tagged by its connection's Seal), an enter down and an ack up, still in blocking loops: the
floor of any step path that keeps netspec's wire, without its event loop or engine.

Per step: its wall time (first send to last reply); the sender's CPU per step per process
(time.process_time); the N processes' CPU per step each (/proc/<pid>/schedstat). netspec's
flat step on this machine cannot be expected below it: every step wakes N processes, and
the sender makes a send and a receive for each.

Prints figures for people, then one JSON object as the last line.

    python bench/stepfloor.py [--processes 100] [--steps 200] [--sealed | --native]
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import socket
import tempfile
import time

from barrier import compiled, cpu_s, measured_apart, percentile
from netspec.protocol.wire import FrameDecoder, Seal, encode

WARM_UP = 20
KEY = os.urandom(32)


def _echo(sock: socket.socket) -> None:
    """One of the N: answer each byte with a byte until the sender hangs up."""
    while sock.recv(1):
        sock.send(b"a")


def _ack_sealed(sock: socket.socket, key: bytes) -> None:
    """One of the N with netspec's wire: answer each sealed enter frame with a sealed ack
    frame, as a daemon's node step does, until the sender hangs up."""
    decoder, seal = FrameDecoder(), Seal(key, b"up")
    decoder.seal = Seal(key, b"down")
    while data := sock.recv(65536):
        for enter in decoder.feed(data):
            entered = time.time_ns()
            sock.send(encode({"status": "ok", "t": "ack", "step": enter["step"], "component": "node",
                              "entered": entered, "acked": time.time_ns(), "entry_clock": [0, 0]}, seal))


def measure(processes: int, steps: int, sealed: bool = False, native: bool = False) -> dict[str, float]:
    """Fork `processes` echoers (ackers: `sealed`; compiled: `native`) over loopback TCP and
    time `steps` steps across them. Forks: call it from a process with no other thread (this
    file's own main does)."""
    with tempfile.TemporaryDirectory() as built:
        program = compiled("echo.c", built) if native else ""
        return _measure(processes, steps, sealed, program)


def _measure(processes: int, steps: int, sealed: bool, program: str) -> dict[str, float]:
    listener = socket.create_server(("127.0.0.1", 0), backlog=processes)
    address, pids = listener.getsockname(), []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:
            try:
                listener.close()
                with socket.create_connection(address) as sock:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    if program:
                        os.set_inheritable(sock.fileno(), True)
                        os.execv(program, [program, str(sock.fileno())])
                    _ack_sealed(sock, KEY) if sealed else _echo(sock)
            finally:
                os._exit(0)
        pids.append(pid)
    peers = [listener.accept()[0] for _ in range(processes)]
    listener.close()
    selector = selectors.DefaultSelector()
    for peer in peers:
        peer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer.setblocking(False)
        selector.register(peer, selectors.EVENT_READ)
    seals = {peer: Seal(KEY, b"down") for peer in peers}
    decoders = {peer: FrameDecoder() for peer in peers}
    for peer in peers:
        decoders[peer].seal = Seal(KEY, b"up")
    durations, cpu, children = [], 0.0, 0.0
    for step in range(WARM_UP + steps):
        if step == WARM_UP:
            cpu, children = time.process_time(), sum(map(cpu_s, pids))
        started = time.perf_counter()
        for peer in peers:
            peer.send(encode({"t": "enter", "components": [{"name": "node"}], "phase": "start_logging",
                              "step": step, "deadline_s": 30.0}, seals[peer]) if sealed else b"e")
        waiting = processes
        while waiting:
            for key, _ in selector.select():
                data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                waiting -= len(decoders[key.fileobj].feed(data)) if sealed else len(data)
        durations.append(time.perf_counter() - started)
    cpu, children = time.process_time() - cpu, sum(map(cpu_s, pids)) - children
    for peer in peers:
        peer.close()
    for pid in pids:
        os.waitpid(pid, 0)
    measured = durations[WARM_UP:]
    return {"processes": processes, "step_p50_ms": percentile(measured, 0.5) * 1e3,
            "step_p99_ms": percentile(measured, 0.99) * 1e3,
            "sender_cpu_us_per_step_process": cpu / steps / processes * 1e6,
            "process_cpu_us_per_step": children / steps / processes * 1e6}


def floor(processes: int, steps: int = 200, sealed: bool = False, native: bool = False) -> dict[str, float]:
    """`measure`, in a process of its own (forking from a caller with threads would copy
    them half-done)."""
    return measured_apart(__file__, processes=processes, steps=steps, sealed=sealed, native=native)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=100)
    parser.add_argument("--steps", type=int, default=200)
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--sealed", action="store_true", help="netspec's sealed frames instead of bytes")
    kind.add_argument("--native", action="store_true", help="compiled processes instead of Python's")
    args = parser.parse_args()
    got = measure(args.processes, args.steps, args.sealed, args.native)
    each_way = "a sealed frame" if args.sealed else "a byte"
    print(f"{args.processes} bare {'compiled ' if args.native else ''}processes, {each_way} each way a step, "
          f"{args.steps} steps, "
          f"{os.cpu_count()} CPUs: step p50 {got['step_p50_ms']:.2f} ms, p99 {got['step_p99_ms']:.2f} ms; "
          f"sender CPU {got['sender_cpu_us_per_step_process']:.1f} us a step a process; "
          f"each process {got['process_cpu_us_per_step']:.1f} us a step")
    print(json.dumps({k: round(v, 3) for k, v in got.items()}))


if __name__ == "__main__":
    main()
