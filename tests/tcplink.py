"""Real TCP across a conditioned link between two namespaced hosts (tests/nethosts.py): the
roles the link tests and bench/links.py run in the hosts' namespaces, and the figures a real
link of the same conditions would give, to compare with.

    python tests/tcplink.py serve PORT                 # in the receiver's namespace
    python tests/tcplink.py requests HOST PORT COUNT   # in the sender's: connect, then a
                                                       # request in two writes, COUNT times
    python tests/tcplink.py bulk HOST PORT SECONDS FROM  # in the sender's: one bulk transfer,
                                                       # its rate from FROM seconds on
    python tests/tcplink.py hold RUN_ID PEER ADDRESS CONDITION_JSON [WITHOUT]
                                                       # netspec.links' LinkSet, as netspecd
                                                       # applies it, until stdin closes

The server answers each request (REQUEST bytes, written by the client in two send()s with
TCP_NODELAY, as an HTTP client writes its headers then its body) with RESPONSE bytes, and
counts a bulk transfer's bytes as they arrive, saying when (CLOCK_REALTIME: the namespaces
share it). Every role prints one JSON object as its last line.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
import time

REQUEST, RESPONSE = 200, 100  # bytes: a request in two halves, and its answer
WIRE = 14 + 20 + 20 + 12  # Ethernet, IPv4, TCP and its timestamps option: a segment's overhead


def _serve_one(conn: socket.socket) -> None:
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        kind = conn.recv(1)
        if kind == b"b":
            head = b""
            while not head.endswith(b"\n"):
                head += conn.recv(1)
            steady_from = float(head)  # seconds left out of the rate: its slow start
            marks, total, start = [], 0, time.time_ns()
            while data := conn.recv(1 << 20):
                total += len(data)
                marks.append((time.time_ns() - start, total))
            steady = [m for m in marks if m[0] >= steady_from * 1e9]
            rate = None
            if len(steady) >= 2 and steady[-1][0] > steady[0][0]:
                rate = (steady[-1][1] - steady[0][1]) * 8 / ((steady[-1][0] - steady[0][0]) / 1e9) / 1e6
            with contextlib.suppress(OSError):  # the client gone: it said nothing to hear
                conn.sendall(json.dumps({"bytes": total, "steady_mbit": rate}).encode())
            return
        pending = 0
        while data := conn.recv(65536):
            pending += len(data)
            while pending >= REQUEST:
                pending -= REQUEST
                conn.sendall(b"r" * RESPONSE)


def serve(port: int) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(64)
    print(json.dumps({"ready": port}), flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve_one, args=(conn,), daemon=True).start()


def requests(host: str, port: int, count: int) -> None:
    """`count` times: a connection's connect timed, then one request in two writes on it."""
    connects, two_sends = [], []
    for _ in range(count):
        began = time.perf_counter()
        conn = socket.create_connection((host, port), timeout=30)
        connects.append((time.perf_counter() - began) * 1e3)
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.sendall(b"q")
            time.sleep(0.05)  # the kind byte's ack back: the request starts on a quiet connection
            began = time.perf_counter()
            conn.send(b"h" * (REQUEST // 2))
            conn.send(b"b" * (REQUEST - REQUEST // 2))
            got = 0
            while got < RESPONSE:
                got += len(conn.recv(RESPONSE - got))
            two_sends.append((time.perf_counter() - began) * 1e3)
    print(json.dumps({"connect_ms": connects, "two_send_ms": two_sends}))


def bulk(host: str, port: int, seconds: float, steady_from: float, congestion: str = "cubic") -> None:
    """One transfer of `seconds` under the congestion control `congestion`; its rate as the
    receiver saw it, from `steady_from` on."""
    conn = socket.socket()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion.encode())
    conn.settimeout(30)
    conn.connect((host, port))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.sendall(b"b%.3f\n" % steady_from)
    chunk, began = b"x" * 65536, time.monotonic()
    while time.monotonic() - began < seconds:
        conn.sendall(chunk)
    conn.shutdown(socket.SHUT_WR)
    conn.settimeout(60)
    said = b""
    while data := conn.recv(4096):
        said += data
    info = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    total_retrans = int.from_bytes(info[100:104], "little")  # tcpi_total_retrans
    print(json.dumps({**json.loads(said), "retransmitted": total_retrans}))


def hold(run_id: str, peer: str, address: str, condition: str, without: str = "") -> None:
    """In a host's namespace: `condition` toward `address` by netspec.links' LinkSet, the
    backends in `without` (LinkOffer fields, comma separated) taken as absent; its parts'
    backends said, held until stdin closes, then the backends' counters said and removed."""
    import msgspec
    from netspec.links import LinkSet, offer
    from netspec.protocol.links import LinkCondition, LinkRule

    have = offer()
    for name in filter(None, without.split(",")):
        setattr(have, name, False)
    links = LinkSet(run_id, "sender", have=have)
    try:
        wanted = msgspec.json.decode(condition, type=LinkCondition)
        rule = LinkRule(peer=peer, address=address, condition=wanted)
        applied = links.apply([rule])
        print(json.dumps({"parts": applied.placements[peer].parts}), flush=True)
        sys.stdin.read()
        print(json.dumps({"stats": msgspec.to_builtins(links.stats().peers[peer])}), flush=True)
    finally:
        links.close()


def window_bytes(sender_netns: str, receiver_netns: str) -> int:
    """What the sockets' buffers let one connection keep in flight: the sender's largest
    send buffer, or half the receiver's largest receive buffer (what it advertises of it at
    tcp_adv_win_scale's default), whichever is less."""
    def sysctl(netns: str, name: str) -> int:
        out = subprocess.run(["ip", "netns", "exec", netns, "sysctl", "-n", name], capture_output=True,
                             text=True, check=True, timeout=10).stdout
        return int(out.split()[-1])
    return min(sysctl(sender_netns, "net.ipv4.tcp_wmem"), sysctl(receiver_netns, "net.ipv4.tcp_rmem") // 2)


def bulk_bound_mbit(rate_mbit: float | None, rtt_ms: float, window: int, mss: int = 1448) -> float:
    """The most a bulk transfer's payload can reach: the rate (of whole frames, so its payload
    share) or the window over the round trip, whichever is less."""
    by_window = window * 8 / (rtt_ms / 1e3) / 1e6
    if rate_mbit is None:
        return by_window
    return min(rate_mbit * mss / (mss + WIRE), by_window)


@contextlib.contextmanager
def role(netns: str, *argv: str):
    """A tcplink role in `netns` that says it is ready (a line) and runs until closed: what it
    said first, and (once closed) last."""
    proc = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, __file__, *argv],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    said: dict = {}
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, f"tcplink {argv[0]} in {netns} did not start (exit {proc.wait(timeout=30)})"
        said["first"] = json.loads(first)
        yield said
    finally:
        if proc.poll() is None and argv[0] == "serve":
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            out, _ = proc.communicate("", timeout=30)
            if out.strip():
                said["last"] = json.loads(out.strip().splitlines()[-1])
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def client(netns: str, *argv: str) -> dict:
    done = subprocess.run(["ip", "netns", "exec", netns, sys.executable, __file__, *argv],
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def linked(h1, h2, run_id: str, port: int, forward: dict, back: dict):
    """h1 -> h2 under `forward`, h2 -> h1 under `back`, h2 serving; yields what h1's LinkSet
    said: its placement first, its counters once the block ends."""
    with role(h1.netns, "hold", run_id, "h2", h2.address, json.dumps(forward)) as there, \
            role(h2.netns, "hold", run_id, "h1", h1.address, json.dumps(back)), \
            role(h2.netns, "serve", str(port)):
        yield there


if __name__ == "__main__":
    which, args = sys.argv[1], sys.argv[2:]
    if which == "serve":
        serve(int(args[0]))
    elif which == "requests":
        requests(args[0], int(args[1]), int(args[2]))
    elif which == "bulk":
        bulk(args[0], int(args[1]), float(args[2]), float(args[3]), *args[4:])
    elif which == "hold":
        hold(*args)
    else:
        raise SystemExit(f"tcplink.py: no role {which!r}")
