"""The controller's end of the daemon fork server (daemon/forkserver.py): local daemons
forked from one pre-loaded process, started on the first request and ended by `close`.

Lifecycle: one `DaemonForks` per run, shared by its local hosts; `spawn` a daemon and wait
for its port, `terminate` it (SIGTERM, then SIGKILL after a grace) and wait for its end,
`close` at the end of the run (or leave its `async with`). It owns the fork server's
process and the task that reads it: `close` ends both and waits for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

from netspec.protocol.errors import ConnectionLost

STOP_GRACE_S = 15.0


class DaemonForks:
    def __init__(self) -> None:
        self.proc: asyncio.subprocess.Process | None = None
        self._starting = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None
        self._next_tag = 0
        self._forked: dict[int, asyncio.Future[int]] = {}  # tag -> pid
        self._ports: dict[int, asyncio.Future[int]] = {}  # pid -> port
        self._ended: dict[int, asyncio.Future[int]] = {}  # pid -> returncode
        self._lost: str | None = None
        self._closed = False

    async def _start(self) -> asyncio.subprocess.Process:
        async with self._starting:
            if self.proc is None:
                self.proc = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "netspec.daemon.forkserver", stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE, start_new_session=True, limit=1 << 20)
                # Owned by this object, not a task group: `close` ends it (see the lifecycle).
                self._reader = asyncio.create_task(self._read())
            return self.proc

    def _future(self, table: dict[int, asyncio.Future[int]], key: int) -> asyncio.Future[int]:
        if key not in table:
            table[key] = asyncio.get_running_loop().create_future()
            if self._lost is not None:
                table[key].set_exception(ConnectionLost("local daemons", detail=self._lost))
        return table[key]

    async def __aenter__(self) -> DaemonForks:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _read(self) -> None:
        """Until the fork server's stdout ends (it exited, or `close` closed its stdin);
        then everything still waited for fails, whatever ended the reading."""
        try:
            await self._read_lines()
        except (ValueError, KeyError, TypeError) as exc:  # said to every waiter, as its cause
            self._lost = f"the daemon fork server said what it cannot have: {exc!r}"
        finally:
            self._lost = self._lost or "the daemon fork server ended"
            for table in (self._forked, self._ports, self._ended):
                for waiter in table.values():
                    if not waiter.done():
                        waiter.set_exception(ConnectionLost("local daemons", detail=self._lost))

    async def _read_lines(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            message = json.loads(line)
            if "tag" in message:
                waiter = self._forked.pop(message["tag"])
                if waiter.done() and "pid" in message:
                    # Its spawn was given up (the connect deadline passed): no host will
                    # ever stop this daemon, so it is stopped here.
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(message["pid"], signal.SIGTERM)
                elif "error" in message:
                    waiter.set_exception(ConnectionLost("local daemons", detail=message["error"]))
                else:
                    waiter.set_result(message["pid"])
            elif "port" in message:
                _settle(self._future(self._ports, message["pid"]), message["port"])
            elif "exited" in message:
                pid = message["exited"]
                _settle(self._future(self._ended, pid), message["returncode"])
                asked = pid in self._ports
                port = self._future(self._ports, pid)  # made if missing: a later `port` sees it failed
                if not port.done():
                    port.set_exception(ConnectionLost(
                        "local daemon", detail=f"netspecd exited {message['returncode']} at start"))
                    if not asked:
                        port.exception()  # nobody waits on it yet: not an error left unseen

    async def spawn(self, argv: list[str], log: Path) -> int:
        """Fork a daemon with netspecd's `argv`, its stderr appended to `log`; its pid."""
        proc = await self._start()
        assert proc.stdin is not None
        self._next_tag += 1
        forked = self._future(self._forked, self._next_tag)
        proc.stdin.write((json.dumps({"tag": self._next_tag, "argv": argv, "log": str(log)}) + "\n").encode())
        return await forked

    def port(self, pid: int) -> asyncio.Future[int]:
        """Resolves to the port daemon `pid` listens on; fails if it ends first."""
        return self._future(self._ports, pid)

    async def terminate(self, pid: int) -> None:
        """SIGTERM, wait for the end; SIGKILL after STOP_GRACE_S."""
        ended = self._future(self._ended, pid)
        for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, STOP_GRACE_S)):
            if ended.done():
                break
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            with contextlib.suppress(TimeoutError, ConnectionLost):
                await asyncio.wait_for(asyncio.shield(ended), grace)

    async def close(self) -> None:
        """End the fork server (its stdin closed; SIGKILL after STOP_GRACE_S) and its
        reader, and wait for both; may be called twice."""
        if self.proc is None or self._closed:
            return
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), STOP_GRACE_S)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        reader = self._reader
        # It ends at the end of the server's stdout, which its exit brings: waited for, not
        # cancelled (a daemon's process the server left behind may hold that pipe for a
        # while; then it is cancelled after the grace, and that is awaited too).
        if reader is not None and not (await asyncio.wait({reader}, timeout=STOP_GRACE_S))[0]:
            reader.cancel()
            await asyncio.wait({reader})
        self._reader, self._closed = None, True  # once all of it is done: a close cut short is done again


def _settle(waiter: asyncio.Future[int], value: int) -> None:
    if not waiter.done():
        waiter.set_result(value)
