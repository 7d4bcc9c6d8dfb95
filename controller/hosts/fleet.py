"""Reach one netspecd per logical host and talk to it.

`Host` is the one interface the engine sees: `start()` makes sure a daemon is reachable
and returns its address, `stop()` ends what `start()` began. LocalHost forks a daemon on
127.0.0.1; AddressHost connects to one that already runs. DaemonClient is the
authenticated connection: requests under deadlines, events pushed to a callback.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import os
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netspec.protocol import events, reading
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.auth import client_handshake, netspec_home
from netspec.protocol.channel import Channel
from netspec.protocol.errors import (
    ConnectionLost,
    DeadlineExceeded,
    HandshakeDropped,
    NetspecError,
    ProtocolError,
    RemoteError,
)
from netspec.protocol.hostfacts import HostFacts
from netspec.protocol.names import safe_name
from netspec.protocol.runrecord import Placement

from ..experiment.model import Host as HostSpec
from .forks import DaemonForks
from .runfiles import RunFiles, local_run_files

EventHandler = Callable[[str, Any], None]  # a kinds.Event, or a Lost
DAEMON_START_S = 20.0
HANDSHAKE_TRIES = 3  # a handshake the daemon dropped for a newcomer is tried twice more


class Lost:
    """The event of a connection's end: `error` says why."""

    __slots__ = ("error",)

    def __init__(self, error: NetspecError):
        self.error = error


class DaemonClient:
    """An authenticated connection to one daemon.

    Lifecycle: `connect()` opens and authenticates; `serve()` must then run (in a task the
    caller owns) to deliver replies and events; `close()` (or leaving its `async with`)
    ends it and may be called twice.
    """

    def __init__(self, host: str, channel: Channel, on_event: EventHandler):
        self.host, self.channel, self.on_event = host, channel, on_event
        self.pending: dict[int, asyncio.Future[k.ReplyFrame | k.ErrorEvent]] = {}
        self.closing = False
        self.lost: NetspecError | None = None
        self.dropped = 0  # handshakes the daemon hung up on before this one got in (`connect`)
        self._next_id = 0

    @classmethod
    async def connect(cls, host: str, address: tuple[str, int], key: bytes,
                      on_event: EventHandler, deadline: float | None = None) -> DaemonClient:
        """Open an authenticated connection to the daemon at `address`.

        A daemon with too many connections in their handshake drops the oldest for each
        newcomer (a flood of half-open connections, or a fleet's burst): a handshake it
        hung up on is tried again on a new connection, HANDSHAKE_TRIES in all, none begun
        past `deadline` (loop time). A refusal is never tried again.

        Raises:
            ConnectionLost: nothing accepts connections at `address`, or the daemon
                hung up as the last handshake tried wrote to it.
            AuthError: the daemon refused the handshake (our key, our protocol, no room
                for a session), or it failed to prove it knows the key.
            HandshakeDropped: the daemon hung up in each handshake tried.
            ConnectionError: the connection was reset in the last handshake tried.
        """
        loop, dropped = asyncio.get_running_loop(), 0
        while True:
            try:
                channel = await Channel.connect(*address, peer=f"host {host}", kinds=events.FROM_DAEMON)
            except OSError as exc:
                raise ConnectionLost(host, detail=f"cannot connect to {address[0]}:{address[1]}: "
                                     f"{exc.strerror or exc}") from exc
            try:
                await client_handshake(channel, key)
            except (HandshakeDropped, ConnectionError, ConnectionLost):
                await channel.close()
                dropped += 1
                if dropped >= HANDSHAKE_TRIES or (deadline is not None and loop.time() >= deadline):
                    raise
                continue
            except BaseException:
                await channel.close()
                raise
            client = cls(host, channel, on_event)
            client.dropped = dropped
            return client

    async def __aenter__(self) -> DaemonClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def serve(self) -> None:
        """Deliver replies to their requests and events to `on_event` until the end."""
        lost: NetspecError = ConnectionLost(self.host, detail="daemon closed the connection")
        # Each message is handled as it is read, not by this task woken for it: a flat
        # step's acks from a thousand hosts are a thousand such wake-ups saved.
        try:
            await self.channel.take_each(self._deliver)
        except (ProtocolError, ConnectionError) as exc:
            lost = ConnectionLost(self.host, detail=str(exc))
            await self.channel.close()  # a stream that broke the protocol is not read on
        self.lost = lost
        for waiter in self.pending.values():
            if not waiter.done():
                waiter.set_exception(lost)
        self.pending.clear()
        if not self.closing:
            self.on_event(self.host, Lost(lost))

    def _deliver(self, message: k.Event | reading.Refused) -> None:
        """A message as it was decoded where it was read (kinds.py): an answer to its
        request, an event, or one that does not fit, which ends the connection."""
        if type(message) is reading.Refused:
            raise ProtocolError(f"dropped: it sent {message.problem}")
        if type(message) is k.ReplyFrame or (type(message) is k.ErrorEvent and message.id is not None):
            waiter = self.pending.pop(message.id, None)  # type: ignore[union-attr]
            if waiter is not None and not waiter.done():
                waiter.set_result(message)  # type: ignore[arg-type]
        else:
            self.on_event(self.host, message)

    async def request(self, kind: str, deadline: float | None = None, during: str = "",
                      **fields: Any) -> Any:
        """Send a request and wait for its reply until the loop-time `deadline`.

        `during` names the phase for error messages; `fields` go on the wire.

        Returns:
            The reply, decoded as `kind`'s (kinds.REPLIES; kinds.Reply for a kind whose
            reply says nothing the controller reads).

        Raises:
            RemoteError: the daemon answered with an error.
            ProtocolError: the reply does not fit `kind`'s, naming the field.
            DeadlineExceeded: no answer before the deadline.
            ConnectionLost: the connection ended first.
        """
        if self.lost is not None:
            raise self.lost
        loop = asyncio.get_running_loop()
        self._next_id += 1
        rid = self._next_id
        waiter = loop.create_future()
        self.pending[rid] = waiter
        if deadline is not None:
            fields["timeout_s"] = max(deadline - loop.time(), 0.001)
        try:
            self.channel.send({"t": kind, "id": rid, **fields})
            async with asyncio.timeout_at(deadline):
                reply = await waiter
        except TimeoutError:
            raise DeadlineExceeded(during or kind, {self.host: [kind]},
                                   fields.get("timeout_s", 0)) from None
        finally:
            self.pending.pop(rid, None)
        if type(reply) is k.ErrorEvent:
            raise RemoteError(self.host, reply.error)
        try:
            answer = reading.reply(kind, reply)
        except ProtocolError as exc:
            raise ProtocolError(f"it sent {exc}", f"host {self.host}") from None
        asked = fields.get("size", m.READ_LIMIT)
        if type(answer) is k.ReadReply and (wrong := events.read_problem(asked, answer)):
            raise ProtocolError(f"it sent {wrong}", f"host {self.host}")
        return answer

    def notify(self, kind: str, **fields: Any) -> None:
        """Send a one-way command; the daemon answers with events, or an error event."""
        self.channel.send({"t": kind, **fields})

    async def close(self) -> None:
        self.closing = True
        await self.channel.close()


class Host(abc.ABC):
    """A logical host of the experiment and the way to reach its daemon."""

    start_deadline_s = 30.0  # what `start` may take, installing included
    # The key its daemon holds for this run alone (a host netspec starts for one run: a
    # container); None: the long-term key, which never leaves this machine but for a daemon
    # the user keeps (ssh, address), and then as the user placed it.
    run_key: bytes | None = None

    def __init__(self, spec: HostSpec):
        self.spec = spec
        self.name = spec.name
        self.notes: list[str] = []  # what its start found left and removed, for the run to say

    @abc.abstractmethod
    async def start(self, log_dir: Path) -> tuple[str, int]:
        """Make sure a daemon runs for this host; return the address to connect to."""

    async def stop(self, run_id: str = "") -> list[str]:
        """End what `start` began; safe to call more than once. Returns what did not go
        as it should (each a sentence, without the host's name), for the run to say."""
        return []  # most hosts start nothing

    async def place(self, programs: list[str]) -> dict[str, str]:
        """Make the programs there; returns where each is on the host (here: where it is)."""
        return {p: p for p in programs}

    def reachable_at(self, facts: HostFacts) -> str:
        """The address other hosts of the run reach this one at (its daemon's `facts`)."""
        return "127.0.0.1"

    def placement(self) -> Placement | None:
        """Where the host was placed, for run.json (a container host's; None for others).
        Known once `start` returned."""
        return None

    def run_files(self, run_id: str) -> RunFiles | None:
        """For a host whose daemon is lost: end what is left of the run there (its
        processes), and return the run's directory on the host, read without the daemon.
        None where only the daemon reaches the host's files. Blocking."""
        return None


class AddressHost(Host):
    """A daemon someone else started, at `address:`."""

    async def start(self, log_dir: Path) -> tuple[str, int]:
        assert self.spec.address is not None
        addr, _, port = self.spec.address.rpartition(":")
        return addr, int(port)

    def reachable_at(self, facts: HostFacts) -> str:
        assert self.spec.address is not None
        return self.spec.address.rpartition(":")[0]


class LocalHost(Host):
    """A daemon this controller forks on 127.0.0.1 for the run (from the run's fork server,
    shared by its local hosts) and stops after it."""

    def __init__(self, spec: HostSpec, forks: DaemonForks):
        super().__init__(spec)
        self.forks = forks
        self.pid: int | None = None
        self.root = local_daemon_root(os.getpid(), self.name)

    async def start(self, log_dir: Path) -> tuple[str, int]:
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / "netspecd.log"
        self.pid = await self.forks.spawn(["--listen", "127.0.0.1:0", "--announce", "--root", str(self.root),
                                           "--parent-pid", str(os.getpid())], log)
        try:
            async with asyncio.timeout(DAEMON_START_S):
                port = await self.forks.port(self.pid)
        except TimeoutError:
            await self.stop()
            raise ConnectionLost(self.name, detail=f"netspecd did not start within "
                                 f"{DAEMON_START_S:g} s") from None
        except ConnectionLost as exc:
            raise ConnectionLost(self.name, detail=f"{exc.detail}; see {log}") from None
        return "127.0.0.1", port

    async def stop(self, run_id: str = "") -> list[str]:
        if self.pid is not None:
            await self.forks.terminate(self.pid)
        _remove_empty_dirs(self.root)
        return []

    def run_files(self, run_id: str) -> RunFiles | None:
        return local_run_files(self.root, run_id, self.name)


# What reaching the fleet may take beyond its slowest host's start: this much for each host
# past the first CONNECT_HOSTS_FREE (the schema's connect_deadline says both: a test holds them).
CONNECT_PER_HOST_S = 0.05
CONNECT_HOSTS_FREE = 100


def connect_deadline_s(hosts: list[Host]) -> float:
    """Reaching the fleet may take what its slowest host's start may, and 50 ms more per
    host beyond the first hundred: hosts are reached a few dozen at a time, one controller
    core serves every handshake, and a fan-out tree's relays then join their children
    (1000 local hosts on this project's 2-core machine took 54 s to reach, tree and clksync
    started, on a slow day)."""
    beyond = max(0, len(hosts) - CONNECT_HOSTS_FREE)
    return max(h.start_deadline_s for h in hosts) + CONNECT_PER_HOST_S * beyond


FDS_PER_HOST = 4  # its connection, and for SSH its transport, channel and tunnel
FDS_SPARE = 256  # run directory files, output files held open, the loop's own


def ensure_fd_limit(hosts: int) -> int:
    """Raise this process's open-file limit to what a fleet of `hosts` needs (as far as the
    hard limit lets an unprivileged process); the limit now.

    Raises:
        NetspecError: the hard limit is below the need, which only its owner can raise.
    """
    need = hosts * FDS_PER_HOST + FDS_SPARE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= need:
        return soft
    if hard != resource.RLIM_INFINITY and hard < need:
        raise NetspecError(f"{hosts} hosts need about {need} open files, and this process may open at most "
                           f"{hard} (its hard limit); raise it (ulimit -Hn, or nofile in "
                           "/etc/security/limits.conf) or split the fleet")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    return need


def local_daemon_root(controller_pid: int, host: str) -> Path:
    """Where the daemon a controller spawns for a local host keeps its runs."""
    return netspec_home() / "work" / f"{controller_pid}-{safe_name(host, 'host')}"


def _remove_empty_dirs(root: Path) -> None:
    """Drop the daemon's work tree if reset left it empty; keep anything not yet gathered."""
    for dirpath, _, _ in sorted(os.walk(root), key=lambda w: -len(w[0])):
        with contextlib.suppress(OSError):
            os.rmdir(dirpath)
