"""Protocol fuzz of a real netspecd: malformed frames before and after authentication.

Before authentication, each connection gets one malformed frame (random bytes, a length
prefix over the limit, a frame cut short, msgpack that is no message map, a message that
is no handshake answer), then the client half-closes. After authentication, sessions send
sealed requests of every type with fields missing, extra, of the wrong type or huge, plus
frames whose MAC is wrong. Every request with an id must be answered (a reply or an error)
or its connection dropped within HANG_S; after each session a `hello` must be answered.

Reported: crashes (the daemon died), hangs, and what the daemon holds at the end against
what it held after a warm-up of WARM_UP_FRAMES not counted: fds, threads, child processes,
and RSS (against RSS after half the frames, since a leak grows with the frames and
allocator noise does not: RSS is sampled at every tenth of the frames, and its trend is
the slope of a line through those samples).

Not fuzzed, and why: `shutdown` (any shutdown stops the daemon, as it should); clksync's
`address` (a random name would be looked up in DNS: traffic leaves the machine). Traffic
goes to 127.0.0.1 only. Bounded by --frames and --seconds.

Prints figures for people, then one JSON object as its last line.

    python bench/fuzz.py [--frames 100000] [--seed 1] [--seconds 900]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack
import psutil
from netspec.protocol.auth import client_handshake, load_or_create_key
from netspec.protocol.channel import Channel
from netspec.protocol.errors import NetspecError
from netspec.protocol.wire import HEADER, encode

HANG_S = 15.0
PRE_AUTH_SHARE = 0.4
CONCURRENT_CONNECTIONS = 32
CONCURRENT_SESSIONS = 8
REQUESTS_PER_SESSION = 100
WARM_UP_FRAMES = 2000
THREAD_CEILING = 2 + min(32, (os.cpu_count() or 1) + 4)
TYPES = ["hello", "setup", "enter", "end", "reset", "files", "read", "clksync", "fz-unknown"]


def templates(rng: random.Random) -> dict[str, dict[str, Any]]:
    """A plausible request of each type, for mutations to start from."""
    return {
        "hello": {},
        "setup": {"run": f"fz-run-{rng.randrange(4)}", "host": "fz-host",
                  "components": [{"name": "c1", "argv": ["fz-no-such-command"]},
                                 {"name": "c2", "program": "fz-no-such-program.py", "args": []}],
                  "streams": {"s": {"enable": ["G"]}}, "camp": None},
        "enter": {"phase": "launch", "step": 0, "deadline_s": 2,
                  "components": [{"name": "c1", "params": {}}], "published": {}},
        "end": {"component": "c1"},
        "reset": {"clean": True},
        "files": {},
        "read": {"path": "/etc/hostname", "offset": 0, "size": 100},
        "clksync": {"role": rng.choice(["serve", "probe"]), "key": os.urandom(16), "peer": "fz",
                    "port": rng.randrange(1, 65536), "interval_ms": 1000, "timestamps": "kernel"},
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


def malformed_request(rng: random.Random, rid: int) -> dict[str, Any]:
    kind = rng.choice(TYPES)
    message = {"t": kind, **templates(rng)[kind]}
    if kind == "clksync":
        message["address"] = "127.0.0.1"  # never mutated: see the module's doc
    if rng.random() < 0.8:
        message = mutate(rng, message)
    message["id"] = rid if rng.random() < 0.95 else value(rng, 3)
    return message


def pre_auth_payload(rng: random.Random) -> bytes:
    pick = rng.randrange(6)
    if pick == 0:
        return os.urandom(rng.randrange(1, 200))
    if pick == 1:
        return HEADER.pack(rng.randrange(4097, 2**32)) + os.urandom(rng.randrange(64))
    if pick == 2:
        frame = encode({"t": "auth", "nonce": os.urandom(32), "mac": os.urandom(32)})
        return frame[:rng.randrange(1, len(frame))]
    if pick == 3:
        body = msgpack.packb(value(rng, 2), use_bin_type=True)[:4096]
        return HEADER.pack(len(body)) + body
    if pick == 4:
        return encode({"t": rng.choice(["auth", "hello", "setup", "reset"]), "nonce": value(rng, 3),
                       "mac": value(rng, 3), "id": 1})[:4100]
    return encode({"t": "auth", "nonce": os.urandom(32), "mac": os.urandom(32)})  # a wrong key


class Daemon:
    def __init__(self, root: Path, key_file: Path):
        self.log = root.with_name("netspecd.log")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "netspec.daemon.main", "--listen", "127.0.0.1:0", "--announce",
                 "--root", str(root), "--key", str(key_file)], stdout=subprocess.PIPE, stderr=log, text=True)
        self.port = json.loads(self.proc.stdout.readline())["port"]  # type: ignore[union-attr]
        self.ps = psutil.Process(self.proc.pid)

    def held(self) -> dict[str, float]:
        with self.ps.oneshot():
            return {"fds": self.ps.num_fds(), "threads": self.ps.num_threads(),
                    "children": len(self.ps.children(recursive=True)),
                    "rss_mb": self.ps.memory_info().rss / 1e6}


class Tally:
    def __init__(self) -> None:
        self.frames = self.pre_auth = self.post_auth = self.answered = self.dropped = 0
        self.hangs: list[str] = []


async def pre_auth_one(port: int, payload: bytes, tally: Tally) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        writer.write_eof()
        async with asyncio.timeout(HANG_S):
            while await reader.read(65536):
                pass
    except TimeoutError:
        tally.hangs.append(f"pre-auth payload {payload[:16].hex()}... never closed")
    except ConnectionError:
        pass
    finally:
        writer.close()
    tally.frames += 1
    tally.pre_auth += 1


async def session(port: int, key: bytes, rng: random.Random, count: int, tally: Tally) -> None:
    channel = await Channel.connect("127.0.0.1", port, "fuzz")
    await client_handshake(channel, key)
    waiting: set[int] = set()
    for n in range(1, count + 1):
        if rng.random() < 0.01:
            channel.transport.write(encode({"t": "hello", "id": n}) + os.urandom(16))  # no MAC
            tally.frames += 1
            tally.post_auth += 1
            break
        message = malformed_request(rng, n)
        try:
            channel.send(message)
        except NetspecError:
            continue  # too big for one frame: refused here, as it should be
        if message["id"] == n and message["t"] != "enter":
            waiting.add(n)
        tally.frames += 1
        tally.post_auth += 1
    else:
        channel.send({"t": "hello", "id": 0})
        waiting.add(0)
    try:
        async with asyncio.timeout(HANG_S):
            while waiting:
                message = await channel.recv()
                if message is None:
                    tally.dropped += 1
                    return
                if message.get("id") in waiting:
                    waiting.discard(message["id"])
                    tally.answered += 1
    except TimeoutError:
        tally.hangs.append(f"{len(waiting)} requests of a session unanswered: {sorted(waiting)[:5]}")
    except (NetspecError, ConnectionError):
        tally.dropped += 1
    finally:
        await channel.close()


async def fuzz(daemon: Daemon, key: bytes, frames: int, seed: int, seconds: float,
               marks: dict[str, dict[str, float]]) -> Tally:
    rng = random.Random(seed)
    tally = Tally()
    give_up = time.monotonic() + seconds
    pre = int(frames * PRE_AUTH_SHARE)
    gate = asyncio.Semaphore(CONCURRENT_CONNECTIONS)

    async def one_pre(payload: bytes) -> None:
        async with gate:
            await pre_auth_one(daemon.port, payload, tally)
    for start in range(0, pre, 1000):
        if time.monotonic() > give_up:
            break
        await asyncio.gather(*(one_pre(pre_auth_payload(rng)) for _ in range(min(1000, pre - start))))
    marks[f"{round(PRE_AUTH_SHARE * 100)}%"] = daemon.held()  # the frames before authentication
    sessions = asyncio.Semaphore(CONCURRENT_SESSIONS)

    async def one_session(n: int) -> None:
        async with sessions:
            await session(daemon.port, key, random.Random(seed * 1_000_003 + n), REQUESTS_PER_SESSION, tally)
    n, tenth = 0, round(PRE_AUTH_SHARE * 10) + 1
    while tally.frames < frames and time.monotonic() < give_up:
        batch = range(n, n + CONCURRENT_SESSIONS * 4)
        await asyncio.gather(*(one_session(i) for i in batch))
        n += len(batch)
        while tenth < 10 and tally.frames >= frames * tenth / 10:
            marks[f"{10 * tenth}%"] = daemon.held()
            tenth += 1
    return tally


async def hello_time(port: int, key: bytes) -> float:
    started = time.perf_counter()
    channel = await Channel.connect("127.0.0.1", port, "check")
    await client_handshake(channel, key)
    channel.send({"t": "hello", "id": 1})
    async with asyncio.timeout(HANG_S):
        await channel.recv()
    await channel.close()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=900.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="netspec-fuzz-") as tmp:
        key_file = Path(tmp) / "key"
        key = load_or_create_key(key_file)
        daemon = Daemon(Path(tmp) / "root", key_file)
        try:
            baseline_hello = asyncio.run(hello_time(daemon.port, key))
            # Warm-up, not counted: the daemon's thread pool grows to its size (idle workers
            # stay, by design) and the allocator to its working set.
            asyncio.run(fuzz(daemon, key, WARM_UP_FRAMES, args.seed + 1, args.seconds, {}))
            time.sleep(3)
            marks = {"warm": daemon.held()}
            started = time.monotonic()
            tally = asyncio.run(fuzz(daemon, key, args.frames, args.seed, args.seconds, marks))
            took = time.monotonic() - started
            crashed = daemon.proc.poll() is not None
            if crashed:
                print("the daemon died; its log ends:", *daemon.log.read_text().splitlines()[-30:], sep="\n")
            after_hello = None if crashed else asyncio.run(hello_time(daemon.port, key))
            time.sleep(3)  # the last sessions' resets
            marks["end"] = daemon.held() if not crashed else {}
        finally:
            daemon.proc.terminate()
            daemon.proc.wait(timeout=30)
    warm, end = marks["warm"], marks.get("end", {})
    leaks = {k: end.get(k, float("nan")) - warm[k] for k in ("fds", "children")}
    # The daemon's default executor keeps up to min(32, cpus + 4) idle workers by design, grown
    # on demand: a thread leak is a count beyond them, the main thread and the stream flusher.
    leaks["threads"] = max(end.get("threads", float("nan")) - THREAD_CEILING, 0)
    rss_growth = end.get("rss_mb", float("nan")) - marks.get("50%", warm)["rss_mb"]
    # A leak grows with the frames: the slope of RSS over the tenths, in MB per 10k frames.
    tenths = [(int(k[:-1]), v["rss_mb"]) for k, v in marks.items() if k.endswith("%")]
    percent, rss = [t[0] for t in tenths], [t[1] for t in tenths]
    slope = (statistics.linear_regression(percent, rss).slope * 100 / (args.frames / 10_000)
             if len(tenths) > 2 else float("nan"))
    print(f"{tally.frames} malformed frames in {took:.1f} s ({tally.frames / took:.0f}/s): "
          f"{tally.pre_auth} before authentication, {tally.post_auth} after")
    print(f"  requests answered: {tally.answered}; sessions dropped by the daemon: {tally.dropped}")
    print(f"  crashes: {int(crashed)}; hangs: {len(tally.hangs)}")
    for hang in tally.hangs[:5]:
        print(f"    {hang}")
    print(f"  hello before: {baseline_hello * 1e3:.1f} ms, after: "
          f"{'-' if after_hello is None else f'{after_hello * 1e3:.1f} ms'}")
    for name, held in marks.items():
        print(f"  held {name:>14}: " + ", ".join(f"{k} {v:.1f}" if k == "rss_mb" else f"{k} {v}"
                                                 for k, v in held.items()))
    print(f"  leaked since warm-up: fds {leaks['fds']:+}, threads beyond the {THREAD_CEILING} "
          f"of an idle daemon {leaks['threads']:+}, "
          f"processes {leaks['children']:+}; RSS growth over the second half {rss_growth:+.1f} MB, "
          f"trend over the tenths {slope:+.2f} MB per 10k frames")
    print(json.dumps({"bench": "fuzz", "frames": tally.frames, "pre_auth": tally.pre_auth,
                      "post_auth": tally.post_auth, "seconds": round(took, 1), "crashes": int(crashed),
                      "hangs": len(tally.hangs), "leaked_fds": leaks["fds"],
                      "leaked_threads": leaks["threads"], "leaked_processes": leaks["children"],
                      "rss_growth_second_half_mb": round(rss_growth, 1),
                      "rss_mb_per_10k_frames": round(slope, 3),
                      "hello_before_ms": round(baseline_hello * 1e3, 2),
                      "hello_after_ms": None if after_hello is None else round(after_hello * 1e3, 2)}))
    return 1 if crashed or tally.hangs or any(v > 0 for v in leaks.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
