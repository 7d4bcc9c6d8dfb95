"""A flood of connections held in their handshake, and legitimate controllers measured
meanwhile (tests/daemon/test_fuzz_protocol.py, bench/fuzz.py). Traffic to 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from netspec.controller.hosts.fleet import DaemonClient
from netspec.protocol.auth import NONCE_BYTES
from netspec.protocol.errors import NetspecError
from netspec.protocol.wire import encode
from protoclient import HANG_S


async def _hold(port: int, half_open: bool, stop: asyncio.Event, tally: dict[str, int]) -> None:
    """One connection held in the handshake for as long as the daemon keeps it, then opened
    again, until `stop`: idle (not a byte sent) or half-open (the challenge read, then a
    part of an auth frame)."""
    partial = encode({"t": "auth", "nonce": os.urandom(NONCE_BYTES), "mac": os.urandom(32)})[:10]
    while not stop.is_set():
        writer = None
        try:
            async with asyncio.timeout(HANG_S):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                if half_open:
                    await reader.read(4096)
                    writer.write(partial)
            tally["open"] += 1
            tally["opened"] += 1
            try:
                while not stop.is_set():
                    try:
                        if not await asyncio.wait_for(reader.read(4096), 0.2):
                            tally["dropped"] += 1  # the daemon hung up: open another, soon
                            await asyncio.sleep(0.1)
                            break
                    except TimeoutError:
                        continue
            finally:
                tally["open"] -= 1
        except (OSError, TimeoutError):
            tally["failed"] += 1
            await asyncio.sleep(0.1)
        finally:
            if writer is not None:
                writer.close()


async def _controller(port: int, key: bytes) -> float:
    """A legitimate controller, netspec's own (its handshake tried again when the daemon
    drops it for a newcomer): connect, authenticate, one hello answered. Its time, in s."""
    started = time.perf_counter()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HANG_S
    async with asyncio.timeout_at(deadline):
        client = await DaemonClient.connect("fz-controller", ("127.0.0.1", port), key,
                                            lambda kind, event: None, deadline)
        try:
            async with asyncio.TaskGroup() as tg:
                served = tg.create_task(client.serve())
                await client.request("hello", deadline)
                served.cancel()
        finally:
            await client.close()
    return time.perf_counter() - started


async def flood(port: int, key: bytes, idle: int, half_open: int, controllers: int,
                seconds: float = 60.0) -> dict[str, Any]:
    """`idle` and `half_open` connections held in their handshake (each reopened when the
    daemon drops it), and meanwhile `controllers` legitimate controllers one after another:
    how long each took to connect and be answered, and how many were refused."""
    stop = asyncio.Event()
    tally = {"open": 0, "opened": 0, "dropped": 0, "failed": 0}
    give_up = time.monotonic() + seconds
    async with asyncio.TaskGroup() as tg:
        for n in range(idle + half_open):
            tg.create_task(_hold(port, n >= idle, stop, tally))
            if n % 50 == 49:
                await asyncio.sleep(0.05)  # the daemon's accept backlog
        opened_by = min(give_up, time.monotonic() + 5)
        while tally["open"] < idle + half_open and time.monotonic() < opened_by:
            await asyncio.sleep(0.05)
        held = tally["open"]
        times, refusals = [], []
        for _ in range(controllers):
            if time.monotonic() > give_up:
                break
            try:
                times.append(await _controller(port, key))
            except (NetspecError, OSError, TimeoutError) as exc:
                refusals.append(f"{type(exc).__name__}: {exc}"[:120])
            await asyncio.sleep(0.05)
        stop.set()
    ms = sorted(t * 1e3 for t in times)
    return {"idle": idle, "half_open": half_open, "held_when_measured": held, "controllers": controllers,
            "answered": len(times), "refused": len(refusals), "refusals": refusals[:3],
            "connect_ms_median": round(ms[len(ms) // 2], 2) if ms else None,
            "connect_ms_max": round(ms[-1], 2) if ms else None,
            "flood_reopened": tally["dropped"], "flood_failed": tally["failed"]}
