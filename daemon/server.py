"""Accept connections, authenticate them, read frames and dispatch requests to handlers.

Each connection is a Session: it owns the run it sets up, and every task of that run
lives in the session's TaskGroup. When the connection ends, for whatever reason, the
run's processes are killed before the session is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from netspec.protocol import kinds as k
from netspec.protocol import reading
from netspec.protocol.auth import server_handshake
from netspec.protocol.channel import Channel
from netspec.protocol.errors import NetspecError, ProtocolError

from .handlers import HANDLERS, INLINE_HANDLERS
from .relay import Relay
from .supervisor import Supervisor

log = logging.getLogger("netspecd")

HANDSHAKE_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 10.0
# Controllers are few: past this many authenticated sessions a new connection is told so
# and closed, before any work is spent on it.
MAX_CONNECTIONS = 64
# Connections in their handshake, counted apart from sessions, each for HANDSHAKE_TIMEOUT_S
# at most. When all are taken, a newcomer drops the oldest whose answer is not in, rather
# than being refused: whoever holds half-open connections cannot keep a controller out
# unless it opens this many while the controller's auth is on its way. Against 500 idle
# and 64 half-open connections, each reopened as soon as it was dropped, 98 to 100
# controllers of 100 got in at the first try at 64, 98 at 32, 46 of 50 at 16, and 39 of 50
# at 16 dropping the oldest whatever it sent; with the controller's own retry of a dropped
# handshake, 100 of 100 (bench/fuzz.py --mode flood, bench/RESULTS.md).
MAX_HANDSHAKES = 64
# Requests of one session being answered at once; past it the session's frames are not
# read until one is answered, so a flood is held back by TCP, not queued in memory.
MAX_IN_FLIGHT = 256
# Every request is decoded into its type where its frame is read (protocol/kinds.py); one
# that does not fit is answered with an error naming the field, and the session reads on.
REQUESTS = reading.Reader(k.REQUESTS, "request")


class _SessionOver(Exception):
    """Raised inside a session's task group to cancel every task it still owns."""


class Session:
    """One authenticated controller connection and the run it set up.

    Lifecycle: made once the connection authenticated; `serve()` in its `async with`, whose
    end (the connection's, a bad frame, a fault in a handler, a cancellation) resets its
    run: no process, thread or open stream of it is left behind. Every task it starts is
    in its task group, which `serve` ends."""

    def __init__(self, daemon: Daemon, channel: Channel):
        self.daemon, self.channel = daemon, channel
        self.supervisor: Supervisor | None = None
        self.relay: Relay | None = None
        self.joined = False
        self.ending = False  # its connection is over: its run is reset, and its id let go, next
        self.tg: asyncio.TaskGroup
        self.in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.lifecycle = asyncio.Lock()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.ending = True
        await self.end_run()

    async def end_run(self) -> None:
        """Reset the session's run (its processes end, its files stay) and let its id go."""
        sup = self.supervisor
        if self.relay is not None:
            relay, self.relay = self.relay, None
            await relay.close()
        if sup is None or self.joined:
            self.supervisor = None
            return
        # Let go of it only once reset: a reset cut short (the session ending while a setup
        # resets the run before it) is done again by the session's own end. That one is the
        # last: it lets go of the id whatever the reset met (cancelled too), or the id would
        # be refused to everyone until the daemon restarts.
        try:
            await sup.reset(clean=False)
        except Exception:
            if not self.ending:
                raise
            log.exception("run %s: its reset at its connection's end failed", sup.run_id)
        finally:
            if self.ending:
                self._let_go(sup)
        if not self.ending:
            self._let_go(sup)

    def _let_go(self, sup: Supervisor) -> None:
        if self.supervisor is sup:
            self.supervisor = None
        if self.daemon.runs.get(sup.run_id) is self:
            del self.daemon.runs[sup.run_id]
        sup.let_go.set()

    def emit(self, message: k.Event) -> None:
        """Send an event; if the controller is gone there is nobody left to tell."""
        try:
            self.channel.send(message)
        except ProtocolError as exc:
            # Too big for one frame: the controller is told so, not left waiting.
            with contextlib.suppress(NetspecError, ConnectionError):
                answers = isinstance(message, k.Reply | k.ErrorEvent)  # a request's: its id
                self.channel.send(k.ErrorEvent(error=k.wire_error(exc), id=message.id if answers else None))
        except (NetspecError, ConnectionError):
            pass

    async def drain(self) -> None:
        with contextlib.suppress(NetspecError, ConnectionError):
            await self.channel.drain()

    async def serve(self) -> None:
        """Answer requests until the connection ends; then every task of the session's is
        ended (its run is reset as its `async with` ends)."""
        try:
            async with asyncio.TaskGroup() as tg:
                self.tg = tg
                self.channel.take(self._take)
                try:
                    while (request := await self.channel.recv()) is not None:
                        if self._take(request):  # one queued behind another, now answered inline
                            continue
                        await self.in_flight.acquire()
                        tg.create_task(self._answer(request))
                except (ProtocolError, ConnectionError) as exc:
                    log.warning("dropping %s: %s", self.channel.peer, exc)
                self.ending = True  # before its tasks unwind: a setup of its run id waits
                raise _SessionOver
        except* _SessionOver:
            pass

    def _take(self, request: k.Request | reading.Refused) -> bool:
        """A request answered as it is read (INLINE_HANDLERS), and one that does not fit its
        type (refused at once); the rest wait for `serve`."""
        if type(request) is reading.Refused:
            self._refuse(request, request.error())
            return True
        if type(request) not in INLINE_HANDLERS:
            return False
        self._answer_now(request)
        return True

    async def _answer(self, request: k.Request) -> None:
        try:
            await self._answer_one(request)
        finally:
            self.in_flight.release()

    async def _answer_one(self, request: k.Request) -> None:
        try:
            async with asyncio.timeout(request.timeout_s):
                reply = await HANDLERS[type(request)](self, request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._refuse(request, exc)
        else:
            self._reply(request, reply)

    def _answer_now(self, request: k.Request) -> None:
        try:
            reply = INLINE_HANDLERS[type(request)](self, request)
        except Exception as exc:
            self._refuse(request, exc)
        else:
            self._reply(request, reply)

    def _reply(self, request: k.Request, reply: k.Reply) -> None:
        if request.id is not None:
            reply.id = request.id
            self.emit(reply)

    def _refuse(self, request: k.Request | reading.Refused, exc: Exception) -> None:
        log.debug("request %s failed", getattr(request, "kind", type(request).__name__), exc_info=True)
        # Without an id (a one-way command) the error is an event of its own.
        self.emit(k.ErrorEvent(error=k.wire_error(exc), id=request.id))


class Daemon:
    """netspecd: serves authenticated controllers until stopped."""

    def __init__(self, key: bytes, root: Path, only_run: str | None = None):
        self.key, self.root = key, root
        self.only_run = only_run  # started for that run alone (its key is that run's): no other is set up
        self.sessions: dict[asyncio.Task[None], Channel] = {}  # authenticated
        self.handshakes: dict[asyncio.Task[None], Channel] = {}  # oldest first
        self.runs: dict[str, Session] = {}
        self._stopped = asyncio.Event()
        self.port: int | None = None  # the port it listens on, once it does

    def stop(self) -> None:
        self._stopped.set()

    async def serve(self, host: str, port: int, on_ready: Any = None) -> None:
        """Listen until `stop()`; then end every session, killing the processes it owns.
        Every connection's task is in one task group: none outlives this call."""
        self.root.mkdir(parents=True, exist_ok=True)
        async with asyncio.TaskGroup() as connections:
            server = await Channel.serve(self._connection, host, port, connections)
            self.port = server.sockets[0].getsockname()[1]
            if on_ready is not None:
                on_ready(self.port)
            async with server:
                await self._stopped.wait()
            # Hanging up ends each session the ordinary way, which resets its run.
            open_now = {**self.handshakes, **self.sessions}
            for channel in open_now.values():
                channel.hang_up()
            if open_now:
                _, stuck = await asyncio.wait(open_now, timeout=CLOSE_TIMEOUT_S)
                for task in stuck:
                    # Cancelled, it still resets its run (`_connection`); the group waits for it.
                    log.warning("connection task %s did not end within %g s of its hang-up: "
                                "cancelled", task.get_name(), CLOSE_TIMEOUT_S)
                    task.cancel()

    async def _connection(self, channel: Channel) -> None:
        channel.kinds = REQUESTS  # from its seal on, each request decoded where it is read
        peer = channel.peer
        if len(self.sessions) >= MAX_CONNECTIONS:
            await self._refuse_busy(channel)
            return
        task = asyncio.current_task()
        assert task is not None
        if len(self.handshakes) >= MAX_HANDSHAKES:
            self._drop_a_handshake(peer)
        self.handshakes[task] = channel
        try:
            try:
                async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                    await server_handshake(channel, self.key)
            finally:
                self.handshakes.pop(task, None)
            if len(self.sessions) >= MAX_CONNECTIONS:  # filled while this one authenticated
                await self._refuse_busy(channel)
                return
            self.sessions[task] = channel
            log.info("controller %s authenticated", peer)
            # However it ends, shutting down (cancelled) too, its run's processes are killed
            # before it goes.
            async with Session(self, channel) as session:
                await session.serve()
        except (NetspecError, ConnectionError, TimeoutError) as exc:
            log.warning("refused %s: %s", peer, exc)
        except Exception:
            # A fault of this daemon's own: this session ends (its run was reset), the
            # daemon and its other sessions go on.
            log.exception("session with %s ended by a fault", peer)
        finally:
            log.info("controller %s gone", peer)
            self.sessions.pop(task, None)
            await channel.close()

    def _drop_a_handshake(self, newcomer: str) -> None:
        """Make room for `newcomer`: drop the oldest connection in its handshake whose answer
        is not in (a controller's auth may wait unread behind a burst of connections), or
        the oldest of all if every answer is in."""
        old = next((task for task, channel in self.handshakes.items() if not channel.answered),
                   next(iter(self.handshakes)))
        channel = self.handshakes.pop(old)  # its own end finds it gone
        log.warning("dropped %s, the oldest of %d connections in their handshake, for %s",
                    channel.peer, MAX_HANDSHAKES, newcomer)
        channel.hang_up()

    async def _refuse_busy(self, channel: Channel) -> None:
        """Tell the peer every session is taken (in place of a challenge, or sealed after
        its handshake) and close."""
        log.warning("refused %s: already %d sessions", channel.peer, len(self.sessions))
        busy = f"netspecd has {MAX_CONNECTIONS} connections already"
        with contextlib.suppress(NetspecError, ConnectionError, TimeoutError):
            channel.send(k.ErrorEvent(error=k.WireError(type="ConnectionLost", message=busy)))
            await asyncio.wait_for(channel.drain(), HANDSHAKE_TIMEOUT_S)
        await channel.close()
