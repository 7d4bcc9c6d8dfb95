"""Reading a frame's body as its typed message (protocol/kinds.py), once, where it is read:
`Reader` for a connection's kinds (channel.py applies it from the seal on), `Refused` for a
whole frame that does not fit, naming its kind and the field, and `reply` for an answer,
decoded as the reply of the request it answers.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .errors import ProtocolError
from .kinds import FAULT, REPLIES, Reply, ReplyFrame
from .messages import CLKSYNC, END, ENTER, FILES, HELLO, JOIN, LEFT, LINKS, READ, RESET, SETUP, SHUTDOWN, TREE
from .wire import MAX_OBJECTS, WALK_FROM, count_objects


def reply(kind: str, frame: ReplyFrame) -> Reply:
    """The reply to a request of `kind`, decoded from its frame as that kind's reply.

    Raises:
        ProtocolError: it does not fit, naming the field.
    """
    try:
        return _REPLY_DECODERS[kind].decode(frame.body)
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"a reply to {kind} that does not fit: {exc}") from None
    except Exception as exc:  # its frame decoded whole with the id alone: a field's text that is no UTF-8
        raise ProtocolError(f"a reply to {kind} that does not decode: {exc}") from None


_REPLY_DECODERS = {kind: msgspec.msgpack.Decoder(REPLIES.get(kind, Reply))
                   for kind in (HELLO, SETUP, ENTER, END, RESET, FILES, READ, CLKSYNC, SHUTDOWN, TREE, JOIN,
                                LINKS, FAULT, LEFT)}


class Refused:
    """A whole frame whose message does not fit its kind: the reader hands it on in the
    message's place (the stream is intact, so a server answers it and reads on)."""

    __slots__ = ("id", "kind", "problem")

    def __init__(self, kind: str, id: int | None, problem: str):
        self.kind, self.id, self.problem = kind, id, problem

    def error(self, peer: str = "") -> ProtocolError:
        return ProtocolError(self.problem, peer)


class _Head(msgspec.Struct):
    """What a frame that does not fit still says of itself: its kind, and the id to answer."""

    t: Any = None
    id: Any = None


_HEAD = msgspec.msgpack.Decoder(_Head)


class Reader:
    """Decodes a frame body into one of `kinds` (a union of tagged Structs). Bodies over
    wire.WALK_FROM are walked and bounded first, as wire.decode_body does."""

    def __init__(self, kinds: Any, what: str = "message"):
        self._decoder = msgspec.msgpack.Decoder(kinds)
        self.what = what

    def __call__(self, body: bytes) -> Any:
        """The message `body` holds, or a Refused for a map with a kind that does not fit.

        Raises:
            ProtocolError: the body is not a msgpack map with a text "t" (then the stream
                cannot be trusted and is dropped).
        """
        if len(body) > WALK_FROM:
            count_objects(body, MAX_OBJECTS)
        try:
            message = self._decoder.decode(body)
        except msgspec.ValidationError as exc:
            return self._refused(body, exc)
        except Exception as exc:  # not msgpack: DecodeError, and text that is no UTF-8 (UnicodeDecodeError)
            raise ProtocolError(f"undecodable frame body: {exc}") from None
        if type(message) is ReplyFrame:
            message.body = body
        return message

    def _refused(self, body: bytes, exc: msgspec.ValidationError) -> Refused:
        try:
            head = _HEAD.decode(body)
        except Exception:  # its kind and id themselves do not decode
            raise ProtocolError("frame is not a message map with a string 't'") from None
        if not isinstance(head.t, str):
            raise ProtocolError("frame is not a message map with a string 't'")
        rid = head.id if type(head.id) is int else None
        why = str(exc)
        if why.startswith("Invalid value") and why.endswith("at `$.t`"):
            return Refused(head.t, rid, f"unknown {self.what} type {head.t[:40]!r}")
        return Refused(head.t, rid, f"{self.what} {head.t[:40]!r} does not fit: {why}")

