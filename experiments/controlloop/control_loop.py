"""A video-like control loop (the KU report, section 4.4: capture -> tracker -> display),
NETSPEC-aware, over TCP.

The tracker listens in phase `listen` and publishes its address. In phase `run` the capture
side connects and first sends frames unlogged for a warm-up, ten times its connect's round
trip and at least `warmup_s`: a fresh connection's slow start and the queue it leaves behind
are TCP's on any link, not the link's delay, and the KU report measured a stream long under
way. Then it sends `frames` frames of `frame_bytes` at `fps` a second on the same
connection, each logged as it is written (VIDEO/frame_sent, tagged with its number); the
tracker logs each
frame once it has read it whole (VIDEO/frame) and answers with a short command (16 bytes,
VIDEO/command_sent), which the capture side logs as it arrives (VIDEO/command). Paired on
the global timeline: a frame's delay (frame_sent -> frame, across the two hosts' clocks) and
the control loop (frame_sent -> command, on the capture host's own clock). Across a link of
one-way delay d each way, the frame's delay grows by d and the loop by 2 d.

`congestion` names the frames' TCP congestion control (the host's default otherwise). The
bundled sweeps ask for cubic, which sends a frame in one flight as the KU report's Linux of
2007 did. BBR, the default of many hosts now, paces each frame at its estimate of the path's
rate, and on a flow that sends a frame and waits (application-limited) that estimate drifts
from run to run: a frame took 14-40 ms more than the link's delay to leave, at random across
a sweep's points, where the link gave each packet its delay to the microsecond.
"""

from __future__ import annotations

import argparse
import socket
import struct
import threading
import time

from netspec import nodelib

FRAME_SENT = nodelib.event("VIDEO", "frame_sent", "the capture side writes a frame")
FRAME = nodelib.event("VIDEO", "frame", "the tracker has read a whole frame")
COMMAND_SENT = nodelib.event("VIDEO", "command_sent", "the tracker writes its command for a frame")
COMMAND = nodelib.event("VIDEO", "command", "the capture side has read the command for a frame")
HEAD = struct.Struct("!QI?")  # the frame's number, its length, whether it is logged (not warm-up)
COMMAND_BYTES = 16


def _read(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        part = conn.recv(min(size - len(data), 1 << 20))
        if not part:
            raise ConnectionError(f"the peer closed after {len(data)} of {size} bytes")
        data += part
    return bytes(data)


class Tracker:
    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.thread: threading.Thread | None = None
        self.frames = 0
        self.failed: str | None = None

    def listen(self, ctx: nodelib.PhaseContext) -> str:
        self.sock = socket.create_server((ctx.params.get("bind", ctx.host_address), 0))
        address, port = self.sock.getsockname()[:2]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        ctx.publish(address=address, port=port)
        return f"listening on {address}:{port}"

    def _serve(self) -> None:
        assert self.sock is not None
        conn, _ = self.sock.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            try:
                while True:
                    try:
                        seq, size, logged = HEAD.unpack(_read(conn, HEAD.size))
                    except ConnectionError:
                        return  # the capture side is done
                    _read(conn, size)
                    if logged:
                        FRAME.log(seq)
                        COMMAND_SENT.log(seq)
                        self.frames += 1
                    conn.sendall(seq.to_bytes(8, "big") + bytes([logged]) + bytes(COMMAND_BYTES - 9))
            except OSError as exc:
                self.failed = f"{type(exc).__name__}: {exc}"

    def collect(self, ctx: nodelib.PhaseContext) -> str:
        if self.thread is not None:
            self.thread.join(timeout=10)
        if self.failed:
            raise RuntimeError(f"the tracker's connection failed after {self.frames} frames: {self.failed}")
        return f"tracked {self.frames} frames"


def capture_run(ctx: nodelib.PhaseContext) -> str:
    frames, size = int(ctx.params.get("frames", 100)), int(ctx.params.get("frame_bytes", 50_000))
    period = 1.0 / float(ctx.params.get("fps", 10))
    address = (ctx.lookup("tracker", "address"), ctx.lookup("tracker", "port"))
    began = time.monotonic()
    with socket.socket() as conn:
        if "congestion" in ctx.params:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, str(ctx.params["congestion"]).encode())
        conn.settimeout(30)
        conn.connect(address)
        warmup = max(float(ctx.params.get("warmup_s", 2.0)), 10 * (time.monotonic() - began))
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        unlogged = int(warmup / period)
        answered = []

        def commands() -> None:
            try:
                for _ in range(unlogged + frames):
                    command = _read(conn, COMMAND_BYTES)
                    if command[8]:
                        seq = int.from_bytes(command[:8], "big")
                        COMMAND.log(seq)
                        answered.append(seq)
            except OSError:
                pass  # said below: fewer commands than frames
        reader = threading.Thread(target=commands, daemon=True)
        reader.start()
        payload, start = bytes(size), time.monotonic()
        for i in range(unlogged + frames):
            delay = start + i * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            logged = i >= unlogged
            if logged:
                FRAME_SENT.log(i - unlogged)
            conn.sendall(HEAD.pack(i - unlogged if logged else i, size, logged) + payload)
        reader.join(timeout=30)
        conn.shutdown(socket.SHUT_WR)
    if len(answered) < frames:
        raise RuntimeError(f"{frames - len(answered)} of {frames} frames got no command back")
    return (f"{frames} frames of {size} bytes at {1 / period:g} a second, each answered, after "
            f"{unlogged} unlogged in a {warmup:.1f} s warm-up")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=["tracker", "capture"], required=True)
    if parser.parse_args().role == "tracker":
        tracker = Tracker()
        nodelib.register("listen", tracker.listen)
        nodelib.register("collect", tracker.collect)
    else:
        nodelib.register("run", capture_run)
    nodelib.run()


if __name__ == "__main__":
    main()
