"""A netspecd for the fuzz to watch, and a client that speaks its protocol frame by frame over a
plain blocking socket (tests/protofuzz.py, tests/protoflood.py, bench/fuzz.py): it can do what
no well-behaved peer does, such as write frames in the auth frame's segment, sealed or not,
or send one frame unsealed after the handshake. The handshake's MACs and the connection's
seals are derived here as docs/protocol.md gives them, not borrowed from protocol/auth.py.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import psutil
from netspec.protocol.auth import NONCE_BYTES
from netspec.protocol.exits import descendants, run_processes
from netspec.protocol.messages import PROTOCOL_VERSION
from netspec.protocol.wire import HEADER, TAG_BYTES, Seal, decode_body, encode

HANG_S = 15.0  # a request's answer, or its connection's end


def handshake_mac(key: bytes, role: bytes, first: bytes, second: bytes) -> bytes:
    """The handshake's MACs and the connection's key, as docs/protocol.md gives them."""
    return hmac.new(key, b"netspec-" + role + first + second, hashlib.sha256).digest()


def connection_seals(key: bytes, nonce_c: bytes, nonce_s: bytes) -> tuple[Seal, Seal]:
    session_key = handshake_mac(key, b"session", nonce_c, nonce_s)
    return Seal(session_key, b"controller->daemon"), Seal(session_key, b"daemon->controller")


class Dropped(Exception):
    """The daemon ended the connection."""


class Hang(Exception):
    """Nothing came within the deadline."""


class Daemon:
    """netspecd as a real process on a free loopback port, and what it holds."""

    def __init__(self, workdir: Path, key_file: Path):
        self.root, self.key_file = workdir / "droot", key_file
        self.log = workdir / "netspecd.log"
        self.start()

    def start(self) -> None:
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "netspec.daemon.main", "--listen", "127.0.0.1:0", "--announce",
                 "--root", str(self.root), "--key", str(self.key_file)],
                stdout=subprocess.PIPE, stderr=log, text=True)
        assert self.proc.stdout is not None
        self.port = json.loads(self.proc.stdout.readline())["port"]
        self.ps = psutil.Process(self.proc.pid)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def held(self) -> dict[str, float]:
        with self.ps.oneshot():
            return {"fds": self.ps.num_fds(), "threads": self.ps.num_threads(),
                    "children": len(descendants(self.proc.pid)), "rss_mb": self.ps.memory_info().rss / 1e6}

    def cpu_s(self) -> float:
        times = self.ps.cpu_times()
        return times.user + times.system

    def run_processes(self, run_id: str) -> list[psutil.Process]:
        return run_processes(run_id, among=descendants(self.proc.pid))

    def log_tail(self, lines: int = 20) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()[-lines:]

    def stop(self) -> None:
        if self.alive:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Client:
    """One connection to netspecd, spoken frame by frame over a blocking socket.

    `extra` is written in the same segment as the auth frame: a function of the two seals
    (controller->daemon, daemon->controller) that returns the bytes to append, so that frames
    can go sealed as the handshake's key says, or unsealed as an attacker would send them.
    """

    def __init__(self, port: int, key: bytes, extra: Any = None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=HANG_S)
        self.buf = bytearray()
        self.out: Seal | None = None
        self.incoming: Seal | None = None
        self.events: list[dict[str, Any]] = []
        self.replies: dict[Any, dict[str, Any]] = {}
        self.next_id = 0
        self.closed = False
        challenge = self.frame(time.monotonic() + HANG_S)
        if challenge.get("t") != "challenge":
            raise Dropped(f"refused before the handshake: {challenge}")
        if challenge.get("proto") != PROTOCOL_VERSION:
            raise Dropped(f"daemon speaks protocol {challenge.get('proto')}")
        nonce_s, nonce_c = challenge["nonce"], os.urandom(NONCE_BYTES)
        to_daemon, to_controller = connection_seals(key, nonce_c, nonce_s)
        auth = encode({"t": "auth", "nonce": nonce_c, "mac": handshake_mac(key, b"client", nonce_s, nonce_c)})
        self.out = to_daemon
        self.sock.sendall(auth + (extra(self) if extra is not None else b""))
        welcome = self.frame(time.monotonic() + HANG_S)
        if welcome.get("t") != "welcome" or not hmac.compare_digest(
                welcome.get("mac", b""), handshake_mac(key, b"server", nonce_c, nonce_s)):
            raise Dropped(f"the daemon refused the key: {welcome}")
        self.incoming = to_controller

    def sealed(self, message: dict[str, Any]) -> bytes:
        assert self.out is not None
        return encode(message, self.out)

    def send(self, t: str, fields: dict[str, Any] | None = None, with_id: bool = True) -> int | None:
        rid = None
        if with_id:
            self.next_id += 1
            rid = self.next_id
        message = {"t": t, **(fields or {}), **({"id": rid} if with_id else {})}
        self.write(self.sealed(message))
        return rid

    def write(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self.closed = True
            raise Dropped(str(exc)) from None

    def _parsed(self) -> dict[str, Any] | None:
        """The next whole frame received, checked against the daemon's seal once the
        handshake set it; None if there is none yet."""
        tag = TAG_BYTES if self.incoming is not None else 0
        if len(self.buf) < HEADER.size:
            return None
        (length,) = HEADER.unpack_from(self.buf)
        if len(self.buf) < HEADER.size + length:
            return None
        body = bytes(self.buf[HEADER.size:HEADER.size + length - tag])
        mac = bytes(self.buf[HEADER.size + length - tag:HEADER.size + length])
        del self.buf[:HEADER.size + length]
        if self.incoming is not None and not hmac.compare_digest(self.incoming.tag(body), mac):
            raise Dropped("a frame from the daemon failed its MAC check")
        return decode_body(body)

    def frame(self, deadline: float) -> dict[str, Any]:
        """The next frame, waiting for it until `deadline`."""
        while (message := self._parsed()) is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Hang("nothing within the deadline")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                raise Hang("nothing within the deadline") from None
            except OSError as exc:
                self.closed = True
                raise Dropped(str(exc)) from None
            if not data:
                self.closed = True
                raise Dropped("end of stream")
            self.buf += data
        return message

    def _file(self, message: dict[str, Any]) -> None:
        if message.get("t") in ("reply", "error") and "id" in message:
            self.replies[message["id"]] = message
        else:
            self.events.append(message)

    def wait(self, ids: set[Any], deadline: float) -> None:
        """Read until every id in `ids` is answered (raises Hang or Dropped otherwise)."""
        while not ids <= self.replies.keys():
            self._file(self.frame(deadline))

    def poll(self) -> None:
        """File what has arrived, without waiting; raises Dropped at the end of the stream."""
        ended: str | None = None
        self.sock.setblocking(False)
        try:
            while data := self.sock.recv(1 << 20):
                self.buf += data
            ended = "end of stream"
        except BlockingIOError:
            pass
        except OSError as exc:
            ended = str(exc)
        finally:
            self.sock.setblocking(True)
        while (message := self._parsed()) is not None:
            self._file(message)
        if ended is not None:
            self.closed = True
            raise Dropped(ended)

    def ask(self, t: str, fields: dict[str, Any] | None = None, timeout: float = HANG_S) -> dict[str, Any]:
        rid = self.send(t, fields)
        self.wait({rid}, time.monotonic() + timeout)
        return self.replies.pop(rid)

    def close(self) -> None:
        self.closed = True
        self.sock.close()


def refused(answer: dict[str, Any]) -> str | None:
    """An error answer's message, or None for a reply."""
    return answer["error"].get("message", "") if answer.get("t") == "error" else None


def empty_arrays_frame(client: Client, rid: int, megabytes: float = 3.8) -> bytes:
    """A sealed hello carrying megabytes of empty msgpack arrays: one byte on the wire each,
    a Python list each in a decoder with no length limits."""
    count = int(megabytes * 2**20)
    body = b"\x83" + msgpack.packb("t") + msgpack.packb("hello") + msgpack.packb("id") + msgpack.packb(rid)
    body += msgpack.packb("fz") + b"\xdd" + count.to_bytes(4, "big") + b"\x90" * count
    assert client.out is not None
    return HEADER.pack(len(body) + TAG_BYTES) + body + client.out.tag(body)


# -- requests of every type, mutated (the malformed-frame fuzz's grammar)

TYPES = ["hello", "setup", "enter", "end", "reset", "files", "read", "clksync", "tree", "join", "fz-unknown"]


def templates(rng: random.Random) -> dict[str, dict[str, Any]]:
    """A plausible request of each type, for mutations to start from."""
    return {
        "hello": {},
        "setup": {"run": f"fz-run-{rng.randrange(4)}", "host": "fz-host",
                  "components": [{"name": "c1", "argv": ["fz-no-such-command"]},
                                 {"name": "c2", "program": "fz-no-such-program.py", "args": []}],
                  "streams": {"s": {"enable": ["G"]}}, "camp": None, "share": True,
                  "join_token": os.urandom(16)},
        "enter": {"phase": "launch", "step": 0, "deadline_s": 2,
                  "components": [{"name": "c1", "params": {}}], "published": {}},
        "end": {"component": "c1"},
        "reset": {"clean": True},
        "files": {},
        "read": {"path": "/etc/hostname", "offset": 0, "size": 100},
        "clksync": {"role": rng.choice(["serve", "probe"]), "key": os.urandom(16), "peer": "fz",
                    "port": rng.randrange(1, 65536), "interval_ms": 1000, "timestamps": "kernel"},
        "tree": {"children": [{"host": "fz", "address": ["127.0.0.1", 1], "hosts": ["fz"]}]},
        "join": {"run": f"fz-run-{rng.randrange(4)}", "host": "fz-host", "token": os.urandom(16)},
        "fz-unknown": {"x": 1},
    }


def value(rng: random.Random, depth: int = 0) -> Any:
    """Any msgpack value: wrong types, edge numbers, now and then a huge one."""
    pick = rng.random()
    if pick < 0.01:
        return "fz-" + "x" * rng.choice([2**16, 2**20, 3 * 2**20])
    if pick < 0.02:
        return os.urandom(rng.choice([2**16, 2**20]))
    choices = [None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**64 - 1, float("nan"), float("inf"), 1e308,
               "", "fz-" + "".join(rng.choice("abc/.%\0\n") for _ in range(rng.randrange(12))),
               "../../fz", "/fz-abs", b"\xff\x00"]
    if depth < 3:
        choices += [[value(rng, depth + 1) for _ in range(rng.randrange(4))],
                    {str(value(rng, 3)): value(rng, depth + 1) for _ in range(rng.randrange(4))}]
    return rng.choice(choices)


def mutate(rng: random.Random, message: dict[str, Any]) -> dict[str, Any]:
    message = dict(message)
    for _ in range(rng.randrange(1, 4)):
        action = rng.random()
        keys = [k for k in message if k not in ("t", "address")]
        if action < 0.3 and keys:
            del message[rng.choice(keys)]
        elif action < 0.5:
            message[f"fz-extra-{rng.randrange(5)}"] = value(rng)
        elif action < 0.9 and keys:
            key = rng.choice(keys)
            inner = message[key]
            if isinstance(inner, list) and inner and isinstance(inner[0], dict) and rng.random() < 0.5:
                first = dict(inner[0])
                first[rng.choice([*first, "fz"])] = value(rng)
                message[key] = [first, *inner[1:]]
            else:
                message[key] = value(rng)
    return message


def mutated_request(rng: random.Random, rid: int) -> dict[str, Any]:
    """A request of any type with fields missing, extra, of the wrong type or huge. clksync's
    `address` is never mutated (a random name would be looked up in DNS: traffic would leave
    the machine); nor is `tree`'s (connections go to 127.0.0.1 only)."""
    kind = rng.choice(TYPES)
    message = {"t": kind, **templates(rng)[kind]}
    if kind == "clksync":
        message["address"] = "127.0.0.1"
    if rng.random() < 0.8:
        message = mutate(rng, message)
    if kind == "tree":
        message["children"] = templates(rng)["tree"]["children"]
    message["id"] = rid if rng.random() < 0.95 else value(rng, 3)
    return message
