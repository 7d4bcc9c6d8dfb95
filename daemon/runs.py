"""Which connection may act on which run of this daemon.

A connection acts on one run. The one that set a run up owns it: it alone resets it, ends
its components, lists and reads its files, starts its clksync, builds its tree, and the
run is reset when that connection ends, however it ends. A parent in the run's fan-out
tree joins it on a connection of its own, with the run's join token, as the host the
daemon is in the run; that connection only relays the run's steps. A daemon holding one
controller's live run takes another's only when it says to share the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from pathlib import Path
from typing import Any, Protocol

from netspec.protocol import kinds as k
from netspec.protocol.errors import NetspecError, ProtocolError

from .relay import Relay
from .supervisor import Supervisor


class DaemonControl(Protocol):
    """What a handler may do to the daemon: find its root and the runs set up on it, stop it."""

    root: Path
    key: bytes
    only_run: str | None  # the one run a daemon started for it sets up (None: any)
    runs: dict[str, Any]  # run id -> the session that set it up

    def stop(self) -> None: ...


class Channel(Protocol):
    peer: str  # who is at the other end, as a message names it


class Session(Protocol):
    """What a handler sees of the connection it answers (server.Session): the daemon, the
    run it set up or joined, the task group that owns the run's tasks, and a way to send
    events."""

    daemon: DaemonControl
    channel: Channel
    supervisor: Supervisor | None
    tg: asyncio.TaskGroup
    lifecycle: asyncio.Lock  # setup, reset and shutdown of the session's run, one at a time
    relay: Relay | None  # the run's fan-out tree below this daemon, on its controller's session
    joined: bool  # a parent's relay connection: it uses the run, another session owns it
    ending: bool  # its connection is over: its run is being reset

    async def end_run(self) -> None: ...

    def emit(self, message: dict[str, Any] | k.Event) -> None: ...


def acted_on(session: Session) -> Supervisor:
    """The run this connection acts on: the one it set up or joined.

    Raises:
        NetspecError: it has none.
    """
    if session.supervisor is None:
        raise NetspecError("no run is set up on this daemon connection")
    return session.supervisor


def own_run(session: Session, what: str) -> Supervisor:
    """The run this connection set up.

    Raises:
        NetspecError: it has none, or it joined its run as a relay parent: `what` (reset,
            list the files of...) is the owner's to do.
    """
    sup = acted_on(session)
    if session.joined:
        raise NetspecError(f"this connection relays run {sup.run_id!r} as a parent in its tree: only "
                           f"the connection that set the run up may {what} it")
    return sup


async def reset_under_way(session: Session, request: k.Setup, until: float) -> None:
    """Wait (until the loop time `until`) while the run id `request` sets up is still held by
    a connection that ended and is resetting it: its controller may come back for it at once
    (a reconnect), and is then not told that another controller holds it."""
    holder = session.daemon.runs.get(request.run)
    if (holder is None or holder is session or holder.supervisor is None
            or not (holder.ending or holder.supervisor.was_reset)):
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout_at(until):
            await holder.supervisor.let_go.wait()


def check_setup(session: Session, request: k.Setup) -> bytes | None:
    """May this connection set up the run `request` names? Returns its join token.

    Raises:
        NetspecError: the connection joined a run; the daemon was started for another run
            alone; another connection holds this run id; or another's live run (not reset)
            holds the host and `share` is not true.
    """
    if session.joined:
        raise NetspecError("this connection relays a run as a parent in its tree: it sets up none")
    run, token, share = request.run, request.join_token, request.share
    only = session.daemon.only_run
    if only is not None and run != only:
        raise NetspecError(f"this daemon was started for run {only!r} alone, with a key of that run's: "
                           f"it sets up no other (asked for {run!r})")
    runs = session.daemon.runs
    holder = runs.get(run)
    if holder is not None and holder is not session:
        raise NetspecError(f"run {run!r} is set up by another controller on this daemon")
    # A run reset already holds no process, and one whose connection ended is being reset:
    # its connection is only on its way out (a controller's next run may come at once).
    others = [(r, s) for r, s in runs.items()
              if s is not session and s.supervisor is not None and not s.supervisor.was_reset
              and not s.ending]
    if others and not share:
        held = ", ".join(f"run {r!r} (set up by the controller at {s.channel.peer})" for r, s in others)
        raise NetspecError(f"this host is in use by {held}; a run shares a host only when asked to "
                           "(ns_control run --share-hosts)")
    return token


def check_join(session: Session, request: k.Join) -> Supervisor:
    """The run a parent in its tree joins on this connection.

    Raises:
        NetspecError: no such run; this connection holds a run already (its own would then
            never be reset when it ends); the token is not the run's; or this daemon is
            another host of the run than the parent expects (as a daemon asked to be its own
            child is).
    """
    run, host, token = request.run, request.host, request.token
    owner = session.daemon.runs.get(run)
    if owner is None or owner.supervisor is None:
        raise NetspecError(f"no run {run!r} is set up on this daemon")
    if session.supervisor is not None:
        raise NetspecError(f"this connection holds run {session.supervisor.run_id!r} already; a parent "
                           "in a tree joins on a connection of its own")
    sup: Supervisor = owner.supervisor
    if sup.join_token is None or not hmac.compare_digest(token, sup.join_token):
        raise NetspecError(f"run {run!r} is not joined without its join token")
    if host != sup.host:
        raise NetspecError(f"this daemon is host {sup.host!r} of run {run!r}, not {str(host)[:100]!r}")
    return sup


def check_subtrees(host: str, children: list[k.Child]) -> None:
    """A tree is a tree: each child heads its own subtree, no host is in two of them, and
    none holds this host (a step relayed into a cycle would go round it for ever).

    Raises:
        ProtocolError: it is not.
    """
    seen: set[str] = set()
    for child in children:
        subtree = [child.host, *child.hosts]
        if host in subtree:
            raise ProtocolError(f"host {host!r} cannot be in its own child {child.host!r}'s subtree "
                                "(a cycle in the tree)")
        twice = seen.intersection(subtree)
        if twice:
            raise ProtocolError(f"hosts {sorted(twice)[:5]} are in the subtrees of two children")
        seen.update(subtree)
