"""Half-open connection flood of a real netspecd: how long a legitimate controller takes to
get in while others hold connections that never authenticate (issue 38, item 2).

An attacker process (this file, run again with --attack) opens IDLE connections that
never write and HALF_OPEN ones that read the challenge and send the start of an auth frame
that never ends; with --reopen each is opened again as soon as the daemon drops it (the
attack of issue 38: 64 held, each reopened when dropped). Once every connection has been
opened once, this process connects CONTROLLERS legitimate controllers one after the other
(TCP connect and the handshake, then a `hello`), and times each. Three rounds: no flood,
the flood held, the flood reopened.

Reported per round: each controller's connect time (median, 95th percentile, max),
refusals (refused, dropped in its handshake, or not in within REFUSED_AFTER_S), and what
the daemon holds at the end (fds, RSS). Traffic goes to 127.0.0.1 only.

Prints figures for people, then one JSON object as its last line.

    python bench/flood.py [--idle 500] [--half-open 64] [--controllers 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from netspec.protocol.auth import client_handshake, load_or_create_key
from netspec.protocol.channel import Channel
from netspec.protocol.errors import NetspecError

REFUSED_AFTER_S = 10.0
# The start of an auth frame: its length says 100 bytes, one follows.
PARTIAL_AUTH = (100).to_bytes(4, "big") + b"\x83"


async def attack(port: int, idle: int, half_open: int, reopen: bool) -> None:
    """Hold `idle` silent and `half_open` begun-auth connections until killed; print
    "ready" once each was opened once, then a count of reopens now and then."""
    opened = asyncio.Event()
    first = 0
    reopened = 0

    async def one(begins_auth: bool) -> None:
        nonlocal first, reopened
        counted = False
        while True:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.01)  # refused at the door: knock again
                continue
            if not counted:
                counted, first = True, first + 1
                if first == idle + half_open:
                    opened.set()
            else:
                reopened += 1
            try:
                if begins_auth:
                    await reader.read(4096)  # the challenge
                    writer.write(PARTIAL_AUTH)
                while await reader.read(65536):  # until the daemon drops it
                    pass
            except OSError:
                pass
            writer.close()
            if not reopen:
                await asyncio.Event().wait()  # dropped, and left so

    async with asyncio.TaskGroup() as tg:
        for n in range(idle + half_open):
            tg.create_task(one(begins_auth=n >= idle))
        await opened.wait()
        print("ready", flush=True)
        while True:
            await asyncio.sleep(1)
            print(f"reopened {reopened}", flush=True)


async def controllers(port: int, key: bytes, count: int) -> tuple[list[float], list[str]]:
    """Connect `count` controllers one after the other; their connect times (s) and refusals."""
    times: list[float] = []
    refusals: list[str] = []
    for _ in range(count):
        started = time.perf_counter()
        try:
            async with asyncio.timeout(REFUSED_AFTER_S):
                channel = await Channel.connect("127.0.0.1", port, "controller")
                try:
                    await client_handshake(channel, key)
                    took = time.perf_counter() - started
                    channel.send({"t": "hello", "id": 1})
                    if await channel.recv() is None:
                        raise NetspecError("no reply to hello")
                finally:
                    await channel.close()
        except (NetspecError, OSError, TimeoutError) as exc:
            refusals.append(f"{type(exc).__name__}: {exc}")
            continue
        times.append(took)
    return times, refusals


def start_daemon(root: Path, key_file: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-m", "netspec.daemon.main", "--listen", "127.0.0.1:0",
                             "--announce", "--root", str(root), "--key", str(key_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())["port"]


def start_attacker(port: int, idle: int, half_open: int, reopen: bool) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, __file__, "--attack", str(port), "--idle", str(idle),
                             "--half-open", str(half_open), *(["--reopen"] if reopen else [])],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "ready": every connection opened once
    if line.strip() != "ready":
        proc.kill()
        raise RuntimeError(f"the attacker did not get its connections open: {line!r}")
    return proc


def summary(name: str, times: list[float], refusals: list[str], daemon: psutil.Process) -> dict:
    ms = sorted(t * 1e3 for t in times)
    held = {"fds": daemon.num_fds(), "rss_mb": round(daemon.memory_info().rss / 1e6, 1)}
    row = {"round": name, "controllers": len(times) + len(refusals), "refused": len(refusals),
           "median_ms": round(statistics.median(ms), 2) if ms else None,
           "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 2) if ms else None,
           "max_ms": round(ms[-1], 2) if ms else None, **held}
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--half-open", type=int, default=64)
    parser.add_argument("--controllers", type=int, default=50)
    parser.add_argument("--attack", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--reopen", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.attack:
        asyncio.run(attack(args.attack, args.idle, args.half_open, args.reopen))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="netspec-flood-") as tmp:
        key_file = Path(tmp) / "key"
        key = load_or_create_key(key_file)
        daemon, port = start_daemon(Path(tmp) / "root", key_file)
        try:
            ps = psutil.Process(daemon.pid)
            for name, reopen in (("no flood", None), ("flood held", False), ("flood reopened", True)):
                attacker = None if reopen is None else start_attacker(port, args.idle, args.half_open, reopen)
                try:
                    times, refusals = asyncio.run(controllers(port, key, args.controllers))
                    rows.append(summary(name, times, refusals, ps))
                finally:
                    if attacker is not None:
                        attacker.terminate()
                        attacker.wait(timeout=30)
                for refusal in sorted(set(refusals))[:3]:
                    print(f"  {name}: {refusal}")
            crashed = daemon.poll() is not None
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
    print(f"{args.controllers} controllers per round against {args.idle} idle and {args.half_open} "
          f"half-open connections (held, then each reopened when dropped); {os.cpu_count()} cpus")
    for row in rows:
        print(f"  {row['round']:>15}: refused {row['refused']}/{row['controllers']}, connect "
              f"median {row['median_ms']} ms, p95 {row['p95_ms']} ms, max {row['max_ms']} ms; "
              f"daemon holds {row['fds']} fds, {row['rss_mb']} MB")
    print(f"  daemon crashed: {int(crashed)}")
    print(json.dumps({"bench": "flood", "idle": args.idle, "half_open": args.half_open,
                      "crashes": int(crashed), "rounds": rows}))
    return 1 if crashed or any(row["refused"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
