"""A primary-backup counter service over UDP, NETSPEC-aware: the experiment's fault schedule
partitions the primary and kills a replica, and the timeline shows the fail-over.

`--role replica` (params: `primary: true` for the one that starts as primary): in phase
`listen` it binds where the other hosts reach it and publishes its address. A primary
answers each client request (adding it to its count), replicates the request to the other
replica and sends it a heartbeat every `heartbeat_ms`; a backup keeps the replicated count
and, once it has heard the primary, takes over as primary when it has missed its heartbeats
for `takeover_ms` (event FO/takeover).

`--role client` (params: `duration_s`, `interval_ms`, `timeout_ms`, `misses`): in phase `run`
it sends a request every `interval_ms` to the replica it takes for the primary, each an
FO/request event and, answered, an FO/rtt interval, both tagged with the request's number;
after `misses` requests in a row without an answer it fails over to the other replica
(FO/failover, tagged with the fail-over's number, its data the replica it left), and the
outage, from the first unanswered request's send to the first answer after, is an FO/outage
interval.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time

from netspec import nodelib

REQUEST = nodelib.event("FO", "request", "the client sends a request (tag: its number)")
RTT = nodelib.interval("FO", "rtt", "a request answered: from its send to its answer (tag: its number)")
FAILOVER = nodelib.event("FO", "failover", "the client turns to the other replica (data: the one it left)")
OUTAGE = nodelib.interval("FO", "outage", "from the first unanswered request's send to the next answer")
TAKEOVER = nodelib.event("FO", "takeover", "a backup that missed the primary's heartbeats becomes primary")
REPLICATED = nodelib.counter("FO", "replicated", "requests a backup took from the primary")
REPLICAS = ("primary", "backup")


class Replica:
    """One replica: its socket's reader answers, replicates and takes heartbeats; its ticker
    sends heartbeats while primary and takes over once they stop while backup."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.primary = False
        self.count = 0
        self.peer: tuple[str, int] | None = None
        self.last_heartbeat: float | None = None  # none heard yet: nothing to miss
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def listen(self, ctx: nodelib.PhaseContext) -> str:
        self.primary = bool(ctx.params.get("primary", False))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((ctx.params.get("bind", ctx.host_address), 0))
        address, port = self.sock.getsockname()
        ctx.publish(address=address, port=port)
        return f"{'primary' if self.primary else 'backup'} on {address}:{port}"

    def serve(self, ctx: nodelib.PhaseContext) -> str:
        """Start answering, replicating and heartbeating (in threads: the replica serves
        whatever phase its component is in)."""
        other = ctx.params["peer"]
        self.peer = (ctx.lookup(other, "address"), ctx.lookup(other, "port"))
        heartbeat, takeover = float(ctx.params.get("heartbeat_ms", 20)) / 1e3, \
            float(ctx.params.get("takeover_ms", 250)) / 1e3
        self.threads = [threading.Thread(target=self._read, daemon=True),
                        threading.Thread(target=self._tick, args=(heartbeat, takeover), daemon=True)]
        for thread in self.threads:
            thread.start()
        return f"serving, peer {other} at {self.peer[0]}:{self.peer[1]}"

    def _read(self) -> None:
        assert self.sock is not None and self.peer is not None
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                data, sender = self.sock.recvfrom(2048)
            except TimeoutError:
                continue
            message = json.loads(data)
            kind = message["t"]
            if kind == "heartbeat":
                self.last_heartbeat = time.monotonic()
            elif kind == "replicate":
                self.count = message["count"]
                REPLICATED.add()
            elif kind == "request" and self.primary:
                self.count += 1
                self.sock.sendto(json.dumps({"t": "replicate", "count": self.count}).encode(), self.peer)
                answer = {"t": "answer", "seq": message["seq"], "count": self.count}
                self.sock.sendto(json.dumps(answer).encode(), sender)

    def _tick(self, heartbeat: float, takeover: float) -> None:
        assert self.sock is not None and self.peer is not None
        while not self.stop.wait(heartbeat):
            if self.primary:
                self.sock.sendto(b'{"t": "heartbeat"}', self.peer)
            elif self.last_heartbeat is not None and time.monotonic() - self.last_heartbeat > takeover:
                self.primary = True
                TAKEOVER.log(self.count)

    def collect(self, ctx: nodelib.PhaseContext) -> str:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=2)
        REPLICATED.log()
        return f"{'primary' if self.primary else 'backup'} at the end, count {self.count}"


def client_run(ctx: nodelib.PhaseContext) -> str:
    params = ctx.params
    duration, interval = float(params.get("duration_s", 3)), float(params.get("interval_ms", 20)) / 1e3
    timeout, misses = float(params.get("timeout_ms", 100)) / 1e3, int(params.get("misses", 3))
    replicas = {name: (ctx.lookup(name, "address"), ctx.lookup(name, "port")) for name in REPLICAS}
    current, missed, failovers, answered, first_missed = "primary", 0, 0, 0, None
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((ctx.host_address, 0))
    end, seq = time.monotonic() + duration, 0
    with sock:
        while time.monotonic() < end:
            seq += 1
            REQUEST.log(seq)
            sent = RTT.start()
            sock.sendto(json.dumps({"t": "request", "seq": seq}).encode(), replicas[current])
            if _answer(sock, seq, time.monotonic() + timeout):
                RTT.end(seq, sent)
                answered += 1
                if first_missed is not None:
                    OUTAGE.end(seq, first_missed)
                missed, first_missed = 0, None
            else:
                missed += 1
                first_missed = sent if first_missed is None else first_missed
                if missed >= misses:  # the primary is gone, for all this client knows
                    failovers += 1
                    FAILOVER.log(failovers, current)
                    current, missed = REPLICAS[1 - REPLICAS.index(current)], 0
            time.sleep(max(0.0, interval - (time.time_ns() - sent) / 1e9))
    print(f"client: {seq} requests, {answered} answered, {failovers} fail-over(s), last to {current}")
    return f"{seq} requests, {answered} answered, {failovers} fail-over(s)"


def _answer(sock: socket.socket, seq: int, deadline: float) -> bool:
    """Whether request `seq` was answered by `deadline` (older answers, late, are dropped)."""
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data = sock.recv(2048)
        except TimeoutError:
            return False
        if json.loads(data).get("seq") == seq:
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=["replica", "client"], required=True)
    if parser.parse_args().role == "replica":
        replica = Replica()
        nodelib.register("listen", replica.listen)
        nodelib.register("serve", replica.serve)
        nodelib.register("collect", replica.collect)
    else:
        nodelib.register("run", client_run)
    nodelib.run()


if __name__ == "__main__":
    main()
