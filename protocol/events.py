"""What a daemon's events and replies must be beyond their shapes, which kinds.py declares
and checks where each frame is read: the controller uses nothing a daemon sent unchecked
(a stream name becomes a file's name; a step index picks a step; a read's data is written
to a file). A malformed event or reply is a protocol error naming its host, not a
controller's crash or a loop without end.

Which components a host runs is the controller's to check (engine/events.py), and a fan-out
tree's hosts the fan-out's (engine/fanout.py): this module knows only the messages.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .kinds import EVENTS, ComponentAck, ReadReply
from .reading import Reader

# The controller's reading of a daemon's frames (its connection's, channel.Channel `kinds`).
FROM_DAEMON = Reader(EVENTS, "event")

# What a component may say in its ack (docs/protocol.md, "Daemon <-> component"): the
# rest of an ack is its daemon's to add.
COMPONENT_ACK_FIELDS = ComponentAck.__struct_fields__


def component_ack_problem(ack: Any) -> str | None:
    """What is wrong with an ack a component sent its daemon, None if nothing: a component
    may be written in any language, against any netspec."""
    try:
        msgspec.convert(ack, ComponentAck)
    except msgspec.ValidationError as exc:
        return f"an ack that does not fit: {exc}"
    return None


def read_problem(asked: int, reply: ReadReply) -> str | None:
    """What is wrong with the reply to a read of `asked` bytes, None if nothing: more than
    asked, or nothing and no end (the controller would read for ever)."""
    if len(reply.data) > asked or (not reply.data and not reply.eof):
        return f"a reply to read of {len(reply.data)} bytes (eof {reply.eof}) for {asked} asked"
    return None
