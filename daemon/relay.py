"""A fan-out tree's relay (`fan_out: N` in the experiment file).

The controller sends a step's enter to the tree's first level only, with every host of
each subtree and what it enters. A daemon enters its own components, passes each child
the part of the enter that is the child's subtree, and sends up one batch of acks, its
own and its subtree's, when the batch is complete, when an ack is an error, or
BATCH_WAIT_S after its first ack (so a slow participant holds no other's ack for long).
Every ack keeps its host and its own stamps: what the controller records is exact.

When the enter asks for a summary (`summarize`), a daemon whose every component acked ok
folds its acks into the batch's summary (protocol/acksummary.py), and a relay merges its
children's summaries into its own: the controller then reads one summary per first-level
host and step, whatever the fleet's size. Any other ack still goes up as itself.

A daemon reaches its children over connections of its own, authenticated with the key
the controller's connection was, or the child's own for the run where the controller gave
one (a container's, controller/hosts/docker.py); a child attaches that connection to the run (`join`) when
it shows the run's join token and names the host the child is in the run. The run's owner
(the controller's session) holds the relay and closes its links when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import msgspec
from netspec.protocol import acksummary, reading
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.acksummary import AckSummary
from netspec.protocol.auth import client_handshake
from netspec.protocol.channel import Channel
from netspec.protocol.errors import NetspecError, ProtocolError

log = logging.getLogger("netspecd")

BATCH_WAIT_S = 0.02
JOIN_TIMEOUT_S = 10.0

Emit = Callable[[k.Event], None]  # an event, a message of kinds.py
# What a child sends up its link, decoded where it is read.
FROM_CHILD = reading.Reader(k.FROM_CHILD, "message from a child")


class Batch:
    """The acks of one step from this daemon's subtree, on their way up: each as itself,
    or folded into a summary (`summarize`)."""

    def __init__(self, step: int, expected: int, emit: Emit, host: str, own: int, summarize: bool,
                 compress: bool = False):
        self.step, self.expected, self.emit, self.compress = step, expected, emit, compress
        self.host, self.own = host, own  # this daemon's host, and how many acks it owes
        self.pending: list[k.Ack] = []
        self.summary = AckSummary()
        self.folding = summarize  # this host's acks, while every one so far is plain
        self.held: list[k.Ack] = []  # ... until its last one
        self.counted = 0
        self._timer: asyncio.TimerHandle | None = None  # the batch's wait, ended by `flush`
        self.closed = False  # its relay closed: what comes now goes up at once, with no timer

    def add(self, acks: list[k.Ack]) -> None:
        self.pending.extend(acks)
        self._counted(len(acks), any(a.status == m.ACK_ERROR for a in acks))

    def add_own(self, ack: k.Ack) -> None:
        """One of this host's acks: held for the summary while every one so far is plain."""
        ack.host = self.host
        if not self.folding or not acksummary.is_plain(ack):
            self._unfold()
            self.add([ack])
            return
        self.held.append(ack)
        if len(self.held) == self.own:
            self.summary.add_host(self.host, self.held)
            self.held = []
        self._counted(1, False)

    def _unfold(self) -> None:
        """This host's acks go up as themselves from now on, those held so far (counted as
        they were held) with the next batch."""
        self.folding = False
        self.pending.extend(self.held)
        self.held = []

    def add_summary(self, wire: k.Summary) -> None:
        self.summary.merge(wire)
        self._counted(wire.acks, False)

    def _counted(self, count: int, error: bool) -> None:
        self.counted += count
        if self.counted >= self.expected or error or self.closed:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(BATCH_WAIT_S, self.flush)

    def close(self) -> None:
        """Send what it holds; from now on each ack goes up as it comes."""
        self.closed = True
        self.flush()

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.held:  # the rest of this host's acks are late: these go up as themselves
            self._unfold()
        summary = self.summary.wire(self.compress) if self.summary.acks else None
        if self.pending or summary:
            acks, self.pending = self.pending, []
            self.emit(k.Acks(step=self.step, acks=acks, summary=summary))
            if summary:
                self.summary = AckSummary()


class Link:
    """This daemon's connection to one child in the tree; its events come back to the relay."""

    def __init__(self, child: str, channel: Channel, hosts: frozenset[str]):
        self.child, self.channel, self.hosts = child, channel, hosts

    async def read(self, relay: Relay) -> None:
        error = "the child closed it"
        try:
            # Each batch handled as it is read, not by a task woken for it.
            await self.channel.take_each(lambda message: relay.from_child(self, message))
        except (ProtocolError, ConnectionError) as exc:
            error = str(exc)
        if not relay.closing:
            lost = f"the relay link to host {self.child} was lost: {error}"
            relay.tell(k.ErrorEvent(error=k.WireError(type="ConnectionLost", message=lost)))


class Relay:
    """This daemon's children in the run's tree and the step batches on their way up.

    Lifecycle: `open()` once (from the `tree` request); `close()` when the run ends."""

    def __init__(self, host: str, tell: Emit):
        # `tell` reaches the controller directly: a link's loss is said there, not up the tree.
        self.host, self.tell = host, tell
        self.links: dict[str, Link] = {}
        self.below: dict[str, Link] = {}  # every descendant -> the link to its subtree
        self.batches: dict[int, Batch] = {}
        self.opened = self.closing = False

    async def open(self, run: str, key: bytes, token: bytes, children: list[k.Child],
                   tg: asyncio.TaskGroup) -> None:
        """Connect to every child, authenticate and join it to `run` with the run's join
        `token`; each link's events are read in a task of `tg` (the run owner's).

        Raises:
            NetspecError: the relay has children already, or a child could not be joined
                (none of the links is left open then).
        """
        if self.opened or self.closing:
            raise NetspecError(f"host {self.host} is connected to its children in the tree already")
        self.opened = True  # at once: a second `tree` meanwhile would leave one set of links unowned
        joined = await asyncio.gather(*(_join(run, key, token, c) for c in children), return_exceptions=True)
        links = [j for j in joined if isinstance(j, Link)]
        failed = [j for j in joined if not isinstance(j, Link)]
        if failed or self.closing:  # the run ended meanwhile: no link outlives it
            for link in links:  # none half-made is left open
                await _close(link.channel)
            self.opened = self.closing  # no link is open: a later `tree` may try again
            raise failed[0] if failed else NetspecError(f"the run ended on host {self.host} as its tree "
                                                        "was being connected")
        for link in links:
            self.links[link.child] = link
            self.below.update(dict.fromkeys(link.hosts, link))
            tg.create_task(link.read(self))

    def enter(self, request: k.Enter, emit: Emit,
              to_controller: bool = False) -> tuple[list[k.Participant], Emit]:
        """Pass the enter on to the children whose subtrees take part; this host's own
        components, and where their acks go (this step's batch, its summary's records
        compressed when it goes `to_controller`)."""
        hosts, lists = request.hosts or {}, request.lists or []
        strangers = [h for h in hosts if h != self.host and h not in self.below]
        if strangers:
            raise ProtocolError(f"hosts {strangers[:5]} are not in the subtree of host {self.host}")
        step = request.step
        own = lists[hosts[self.host]] if self.host in hosts else []
        batch = self.batches[step] = Batch(step, sum(len(lists[i]) for i in hosts.values()), emit, self.host,
                                           len(own), request.summarize, to_controller)
        parts: dict[str, dict[str, int]] = {}
        for host, index in hosts.items():
            if host != self.host:
                parts.setdefault(self.below[host].child, {})[host] = index
        for child, part in parts.items():
            try:
                self.links[child].channel.send(msgspec.structs.replace(request, hosts=part, id=None,
                                                                       timeout_s=None))
            except (NetspecError, ConnectionError) as exc:
                raise NetspecError(f"cannot relay the step to host {child}: {exc}") from exc
        return own, batch.add_own

    def from_child(self, link: Link, message: k.Event | reading.Refused) -> None:
        if type(message) is k.Acks:
            acks, summary = message.acks, message.summary
            foreign = [a.host for a in acks if a.host not in link.hosts]
            wrong = None if summary is None else acksummary.problem(summary, link.hosts.__contains__)
            batch = self.batches.get(message.step)
            if not foreign and wrong is None and batch is not None:
                if summary is not None:
                    batch.add_summary(summary)
                if acks or summary is None:
                    batch.add(acks)
                return
            why = (f"acks of hosts {foreign[:5]} outside its subtree" if foreign else wrong
                   or "acks of a step never sent to it")
            self.tell(k.ErrorEvent(error=k.WireError(type="ProtocolError",
                                                     message=f"host {link.child} relayed {why}")))
        elif type(message) is reading.Refused:
            self.tell(k.ErrorEvent(error=k.WireError(type="ProtocolError",
                                                     message=f"host {link.child} relayed {message.problem}")))
        elif type(message) is k.ErrorEvent:
            error = message.error
            self.tell(k.ErrorEvent(error=msgspec.structs.replace(
                error, message=f"host {link.child} (relayed by host {self.host}): {error.message}")))

    async def close(self) -> None:
        """Send what the batches hold and close every link (each child's joined connection
        ends, and with it the cap slot it held there)."""
        self.closing = True
        for batch in self.batches.values():
            batch.close()
        for link in self.links.values():
            await _close(link.channel)


async def _join(run: str, key: bytes, token: bytes, child: k.Child) -> Link:
    name, address, hosts = child.host, child.address, frozenset(child.hosts)
    channel: Channel | None = None
    try:
        async with asyncio.timeout(JOIN_TIMEOUT_S):
            channel = await Channel.connect(address[0], address[1], peer=f"host {name}", kinds=FROM_CHILD)
            await client_handshake(channel, child.key or key)
            channel.send({"t": m.JOIN, "id": 1, "run": run, "host": name, "token": token})
            reply = await channel.recv()
    except (OSError, NetspecError, TimeoutError) as exc:
        await _close(channel)
        raise NetspecError(f"cannot reach host {name} at {address[0]}:{address[1]} to relay to it: "
                           f"{exc or type(exc).__name__}") from exc
    if type(reply) is not k.ReplyFrame:
        await _close(channel)
        message = (reply.error.message if type(reply) is k.ErrorEvent else
                   reply.problem if type(reply) is reading.Refused else "it hung up" if reply is None else
                   f"it answered with {type(reply).__name__}")
        raise NetspecError(f"host {name} refused to join the relay tree: {message}")
    return Link(name, channel, hosts)


async def _close(channel: Channel | None) -> None:
    if channel is not None:
        with contextlib.suppress(ConnectionError, OSError):
            await channel.close()
