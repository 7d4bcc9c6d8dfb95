"""The run's ack journal: where the controller appends the records of the acks a fan-out
tree summarized (protocol/acksummary.py) as they arrive, without reading them, and from
which run.json gets them: when the run ends, or when a reader loads a run still going or
whose controller was killed (runrecord.load_record).

The file is a stream of msgpack frames [step index, received_ns, records], where records
are the summaries' bytes: a stream of [host, component, entry] items, each entry what the
step's record keeps of one ack but for `received_ns`, which is the frame's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack

from .errors import NetspecError

ACK_JOURNAL = "run.acks"
ENTRY_FIELDS = {"status": str, "message": str, "entered_ns": int, "acked_ns": int, "start_ns": int,
                "start_bound_ns": int, "release_missed_ns": int, "release_unsynchronised": bool,
                "release_realtime_refused": bool}


def frame(index: int, received_ns: int, records: bytes) -> bytes:
    return msgpack.packb([index, received_ns, records], use_bin_type=True)


def entries(records: bytes) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """The (host, component, entry) items of a summary's records, each checked.

    Raises:
        ValueError: an item is not [host, component, entry] of the fields a step keeps.
    """
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True)
    unpacker.feed(records)
    for item in unpacker:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                and isinstance(item[1], str) and isinstance(item[2], dict)
                and all(isinstance(v, ENTRY_FIELDS.get(k, ())) for k, v in item[2].items())):
            raise ValueError(f"a record that is not [host, component, entry]: {str(item)[:80]}")
        yield item[0], item[1], item[2]


def fold(run: Path, record: dict[str, Any]) -> dict[str, Any]:
    """`record` with every ack of its ack journal in its step, if it has a journal. An entry
    the step has already (recorded as itself) stays as it is.

    Raises:
        NetspecError: naming the file and the frame, when a frame is malformed.
    """
    try:
        data = (run / ACK_JOURNAL).read_bytes()
    except FileNotFoundError:
        return record
    except OSError as exc:
        raise NetspecError(f"{run}/{ACK_JOURNAL}: unreadable ({exc})") from exc
    steps = record.get("steps") or []
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(data)
    # A frame cut short by a kill is the file's end: the unpacker stops before it.
    number = read = 0
    for number, item in enumerate(unpacker, 1):
        read = unpacker.tell()  # after the loop, a frame cut short may have moved it on
        try:
            index, received, records = item
            if not (isinstance(index, int) and 0 <= index < len(steps) and isinstance(received, int)
                    and isinstance(records, bytes)):
                raise ValueError("not [step index, received_ns, records] of a step in run.json")
            step = steps[index]
            hosts = step.setdefault("hosts", {})
            for host, component, entry in entries(records):
                info = hosts.setdefault(host, {"components": {}})
                info["components"].setdefault(component, {**entry, "received_ns": received, "outcome": "ok"})
                info["done_ns"] = max(info.get("done_ns", 0), received)
                if "sent_ns" in step:
                    info.setdefault("sent_ns", step["sent_ns"])
        except (TypeError, ValueError) as exc:
            raise NetspecError(f"{run}/{ACK_JOURNAL}: frame {number}: {exc}") from None
    if read < len(data):
        note_cut_short(record, {"file": ACK_JOURNAL, "frame": number + 1, "bytes": len(data) - read,
                                **_step_of(data[read:])})
    return record


def _step_of(tail: bytes) -> dict[str, int]:
    """The step index a frame cut short begins with, when that much of it was written."""
    unpacker = msgpack.Unpacker()
    unpacker.feed(tail)
    try:
        unpacker.read_array_header()
        index = unpacker.unpack()
    except (msgpack.OutOfData, ValueError):
        return {}
    return {"step": index} if isinstance(index, int) else {}


def note_cut_short(record: dict[str, Any], said: dict[str, Any]) -> None:
    """Say in `record` that a journal's last entry was cut short by a kill (once, however
    often the record is read): what it held is not in the record."""
    cut = record.setdefault("cut_short", [])
    if said not in cut:
        cut.append(said)
