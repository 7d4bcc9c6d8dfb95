"""The daemon's end of an aware component's channel: the component's registration, each
phase it is asked to enter and its ack, and the STOP that asks it to end. Every wait on it
ends when the component does (`ComponentChannel.fail`, at its exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Any

from netspec.protocol import events
from netspec.protocol import messages as m
from netspec.protocol.channel import Channel
from netspec.protocol.errors import NetspecError, ProtocolError


class ComponentExited(NetspecError):
    """The component's process ended while something still waited on it."""


class ComponentChannel:
    """What the daemon waits for of one component over its channel.

    Lifecycle: made with its component, its waits pending (a plain command's never opens:
    they end only by `fail`); `open` takes the daemon's end of the socketpair once the
    process is spawned; `read` runs in the component's task group, welcoming its
    registration and handing each ack to the `enter` that waits for it, until its end
    closes; `fail` ends every wait still pending (the component's exit, or a broken frame);
    `close` closes the channel, and may be called twice. Each role the component claims (or
    lets go) is handed to `claimed` (role, held, its instant on the host's clock)."""

    def __init__(self, name: str, run_id: str, claimed: Callable[[str, bool, int], None]):
        self.name, self.run_id, self.claimed = name, run_id, claimed
        self.channel: Channel | None = None
        self.registered: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}  # enters awaiting their ack, by id
        self.handed_back: list[str] = []  # the files its acks named
        self._next_id = 0

    async def open(self, sock: socket.socket) -> None:
        """Talk over `sock`, the daemon's end of the socketpair (closed if this fails)."""
        try:
            self.channel = await Channel.over(sock, peer=f"component {self.name}")
        except BaseException:
            sock.close()
            raise

    async def close(self) -> None:
        if self.channel is not None:
            await self.channel.close()

    async def read(self) -> None:
        """Take what the component sends until its end closes: its registration (answered
        with a welcome) and its acks."""
        assert self.channel is not None
        try:
            while (message := await self.channel.recv()) is not None:
                if message["t"] == m.REGISTER and not self.registered.done():
                    self.channel.send({"t": m.WELCOME, "component": self.name,
                                       "run": self.run_id})
                    self.registered.set_result(list(message.get("phases", [])))
                elif message["t"] == m.ACK:
                    waiter = self.pending.pop(message.get("id"), None)
                    if waiter and not waiter.done():
                        waiter.set_result(message)
                elif message["t"] == m.CLAIM:
                    role, held, at = message.get("role"), message.get("held"), message.get("at")
                    if not m.is_role(role) or type(held) is not bool or type(at) is not int:
                        raise ProtocolError(f"a claim of a role, not of a claim's form: {str(message)[:200]}")
                    self.claimed(role, held, at)
        except ConnectionError:
            # Its end went away (a process killed with an enter unread resets it): its exit,
            # watched by its ComponentProcess, says why to everything waiting on it.
            await self.channel.close()
        except ProtocolError as exc:
            # The stream cannot be trusted after a bad frame: drop it, and let everything
            # waiting on this component know now rather than at its deadline.
            self.fail(ComponentExited(f"broke the netspec protocol ({exc})"))
            await self.channel.close()

    def fail(self, error: ComponentExited) -> None:
        """End every wait still pending (its registration, each enter's ack) with `error`."""
        for waiter in [self.registered, *self.pending.values()]:
            if not waiter.done():
                waiter.set_exception(error)
                waiter.exception()  # marks it retrieved: a plain command's has no waiter
        self.pending.clear()

    async def enter(self, phase: str, params: dict[str, Any], published: dict[str, Any],
                    **fields: Any) -> dict[str, Any]:
        """Ask the component to enter `phase` (`fields` go along) and return its ack, of
        what a component may say only; an ack not of an ack's form becomes an error ack
        that says so.

        Raises:
            ComponentExited: it ended (or broke the protocol) before it acked.
        """
        assert self.channel is not None
        self._next_id += 1
        waiter = asyncio.get_running_loop().create_future()
        self.pending[self._next_id] = waiter
        self.channel.send({"t": m.ENTER, "id": self._next_id, "phase": phase, "params": params,
                           "published": published, **fields})
        ack = await waiter
        if wrong := events.component_ack_problem(ack):
            # The component's fault, said as its own: not passed on for the controller to refuse.
            return {"status": m.ACK_ERROR, "message": f"the component sent {wrong}: {str(ack)[:200]}"}
        self.handed_back.extend(ack.get("files", []))
        # Only what a component may say goes on: the rest of an ack is the daemon's to add.
        return {k: ack[k] for k in events.COMPONENT_ACK_FIELDS if k in ack}

    def ask_to_stop(self) -> bool:
        """Send it STOP; False if it has no channel to send over (a plain command)."""
        if self.channel is None:
            return False
        with contextlib.suppress(NetspecError, ConnectionError):
            self.channel.send({"t": m.STOP})
        return True
