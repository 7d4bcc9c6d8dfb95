"""A primary that replicates each write to its backups, for the pairs' tests: every write is
logged KV/replicate by the primary before it is sent, and KV/applied by each backup once
applied, with the write's number as the tag. A backup's `apply_us` is how long applying
takes (a busy wait): the slower backup is the one the primary waits for.

    --role backup:  phase listen: accept the primary, publish the address; apply each write
    --role primary: phase run: `count` writes, each to every backup in `backups` (names),
                    waiting for every backup's ack before the next
"""

from __future__ import annotations

import argparse
import socket
import threading
import time

from netspec import nodelib

REPLICATE = nodelib.event("KV", "replicate", "the primary sends a write to its backups")
APPLIED = nodelib.event("KV", "applied", "a backup has applied a write")
COMMITTED = nodelib.event("KV", "committed", "every backup acked the write")


def _recv_write(conn: socket.socket) -> bytes:
    """One write's 8 bytes (MSG_WAITALL: all of them, or the peer closed)."""
    write = conn.recv(8, socket.MSG_WAITALL)
    if len(write) < 8:
        raise ConnectionError("peer closed")
    return write


class Backup:
    def __init__(self) -> None:
        self.applied = 0
        self.thread: threading.Thread | None = None

    def listen(self, ctx: nodelib.PhaseContext) -> str:
        sock = socket.create_server((ctx.host_address, 0))
        address, port = sock.getsockname()[:2]
        apply_ns = int(float(ctx.params.get("apply_us", 0)) * 1000)
        self.thread = threading.Thread(target=self._serve, args=(sock, apply_ns), daemon=True)
        self.thread.start()
        ctx.publish(address=address, port=port)
        return f"listening on {address}:{port}"

    def _serve(self, sock: socket.socket, apply_ns: int) -> None:
        conn, _ = sock.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn, sock:
            while True:
                try:
                    write = _recv_write(conn)
                except ConnectionError:
                    return
                until = time.perf_counter_ns() + apply_ns
                while time.perf_counter_ns() < until:
                    pass
                APPLIED.log(int.from_bytes(write, "big"))
                conn.sendall(write)
                self.applied += 1

    def collect(self, ctx: nodelib.PhaseContext) -> str:
        if self.thread is not None:
            self.thread.join(timeout=5)
        return f"applied {self.applied} writes"


def primary_run(ctx: nodelib.PhaseContext) -> str:
    count = int(ctx.params.get("count", 500))
    names = ctx.params.get("backups", ["backup1", "backup2"])
    conns = [socket.create_connection((ctx.lookup(n, "address"), ctx.lookup(n, "port")), timeout=10)
             for n in names]
    try:
        for conn in conns:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for seq in range(count):
            write = seq.to_bytes(8, "big")
            REPLICATE.log(seq)
            for conn in conns:
                conn.sendall(write)
            for conn in conns:
                _recv_write(conn)
            COMMITTED.log(seq)
    finally:
        for conn in conns:
            conn.close()
    return f"{count} writes replicated to {', '.join(names)}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=["primary", "backup"], required=True)
    if parser.parse_args().role == "backup":
        backup = Backup()
        nodelib.register("listen", backup.listen)
        nodelib.register("collect", backup.collect)
    else:
        nodelib.register("run", primary_run)
    nodelib.run()


if __name__ == "__main__":
    main()
