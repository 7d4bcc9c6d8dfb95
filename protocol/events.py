"""The events and replies a daemon sends its controller, checked at the wire: what each
kind must carry and of which types, so that the controller uses nothing a daemon sent
unchecked (a stream name becomes a file's name; a step index picks a step; a read's data
is written to a file). A malformed event or reply is a protocol error naming its host, not
a controller's crash or a loop without end.

Which components a host runs is the controller's to check (engine.py): this module knows
only the shapes.
"""

from __future__ import annotations

from typing import Any

from .messages import (
    ACK,
    ACK_ERROR,
    ACK_OK,
    ACK_WARNING,
    ACKS,
    CLKSYNC,
    END,
    ERROR,
    EXIT,
    FILES,
    HELLO,
    OUTPUT,
    READ,
    READ_LIMIT,
    SETUP,
)

STREAMS = ("stdout", "stderr")
STATUSES = (ACK_OK, ACK_WARNING, ACK_ERROR)
ERROR_FIELDS = ("type", "message")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _are(fields: list[str]) -> str:
    return f"{' and '.join(fields)} {'is' if len(fields) == 1 else 'are'}"


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# Each field an ack may carry, and the test of its value; the first four are required.
ACK_FIELDS = {
    "step": lambda v: _int(v) and v >= 0, "component": lambda v: isinstance(v, str),
    "status": lambda v: v in STATUSES, "entered": _int, "acked": _int,
    "message": lambda v: isinstance(v, str), "traceback": lambda v: isinstance(v, str),
    "entry_clock": lambda v: isinstance(v, list) and len(v) == 2 and all(map(_int, v)),
    "release": lambda v: isinstance(v, dict) and _int(v.get("missed_ns", 0)),
    "phases": _strings, "published": lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
    "clock": lambda v: isinstance(v, dict)}
ACK_REQUIRED = ("step", "component", "status", "entered", "acked")
EXIT_FIELDS = {"component": lambda v: isinstance(v, str), "returncode": _int, "duration_s": _number,
               "argv": _strings, "ended_ns": _int, "failed": lambda v: isinstance(v, bool)}


def ack_problem(ack: Any) -> str | None:
    """What is wrong with one ack, None if nothing."""
    if not isinstance(ack, dict):
        return "an ack that is not a map"
    missing = [k for k in ACK_REQUIRED if k not in ack]
    if missing:
        return f"an ack without {', '.join(missing)}"
    wrong = [k for k, ok in ACK_FIELDS.items() if k in ack and not ok(ack[k])]
    return f"an ack whose {_are(wrong)} malformed" if wrong else None


def problem(event: Any) -> str | None:
    """What is wrong with an event from a daemon, None if nothing. A batch of acks from a
    fan-out tree is checked further by the controller's fan-out (it knows the tree)."""
    if not isinstance(event, dict):
        return "an event that is not a map"
    kind = event.get("t")
    if kind == ACK:
        return ack_problem(event)
    if kind == OUTPUT:
        if not (isinstance(event.get("component"), str) and event.get("stream") in STREAMS
                and isinstance(event.get("data"), bytes)):
            return f"an output event that is not component, stream ({' or '.join(STREAMS)}) and data (bytes)"
        return None
    if kind == EXIT:
        wrong = [k for k, ok in EXIT_FIELDS.items() if not ok(event.get(k))]
        return f"an exit event whose {_are(wrong)} missing or malformed" if wrong else None
    if kind == ERROR:
        error = event.get("error")
        if not (isinstance(error, dict) and all(isinstance(error.get(k, ""), str) for k in ERROR_FIELDS)):
            return "an error event without an error map of type and message"
        return None
    if kind == ACKS:
        acks = event.get("acks")
        if not (_int(event.get("step")) and isinstance(acks, list)):
            return "a batch of acks that is not a step and a list of acks"
        wrong = next((w for w in map(ack_problem, acks) if w), None)
        return f"a batch with {wrong}" if wrong else None
    return f"an event of unknown kind {str(kind)[:40]!r}"


def _file(entry: Any) -> bool:
    return (isinstance(entry, dict) and isinstance(entry.get("component"), str | None)
            and isinstance(entry.get("name"), str) and isinstance(entry.get("path"), str)
            and _int(entry.get("size")) and isinstance(entry.get("missing", False), bool))


# What the controller reads of each reply, and the test of each field's value.
REPLY_FIELDS: dict[str, dict[str, Any]] = {
    HELLO: {"protocol": _int, "pid": _int, "facts": lambda v: isinstance(v, dict),
            "now_ns": lambda v: v is None or _int(v)},
    SETUP: {"root": lambda v: isinstance(v, str)},
    END: {"returncode": lambda v: v is None or _int(v), "forced": lambda v: isinstance(v, bool)},
    FILES: {"files": lambda v: isinstance(v, list) and all(map(_file, v))},
    READ: {"data": lambda v: isinstance(v, bytes), "eof": lambda v: isinstance(v, bool)},
    CLKSYNC: {"port": lambda v: v is None or (_int(v) and 0 < v < 65536)},
}


def reply_problem(request: dict[str, Any], reply: dict[str, Any]) -> str | None:
    """What is wrong with the reply to `request`, None if nothing."""
    fields = REPLY_FIELDS.get(request["t"], {})
    wrong = [k for k, ok in fields.items() if not ok(reply.get(k))]
    if wrong:
        return f"a reply to {request['t']} whose {_are(wrong)} missing or malformed"
    if request["t"] == READ and (len(reply["data"]) > request.get("size", READ_LIMIT)
                                 or (not reply["data"] and not reply["eof"])):
        # More than asked, or nothing and no end: the controller would read for ever.
        return (f"a reply to read of {len(reply['data'])} bytes (eof {reply['eof']}) for "
                f"{request.get('size')} asked")
    return None


# What a component's ack may carry (docs/protocol.md, "Daemon <-> component"); status is required.
COMPONENT_ACK_FIELDS = {
    "status": lambda v: v in STATUSES, "message": lambda v: isinstance(v, str),
    "traceback": lambda v: isinstance(v, str), "files": _strings,
    "published": ACK_FIELDS["published"], "started": _int, "ended": _int}


def component_ack_problem(ack: dict[str, Any]) -> str | None:
    """What is wrong with an ack a component sent its daemon, None if nothing: a component
    may be written in any language, against any netspec."""
    wrong = [k for k, ok in COMPONENT_ACK_FIELDS.items()
             if (k in ack or k == "status") and not ok(ack.get(k))]
    return f"an ack whose {_are(wrong)} malformed" if wrong else None
