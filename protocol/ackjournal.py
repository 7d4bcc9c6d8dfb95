"""The run's ack journal: where the controller appends the records of the acks a fan-out
tree summarized (protocol/acksummary.py) as they arrive, without reading them, and from
which run.json gets them: when the run ends, or when a reader reads a run still going or
whose controller was killed (protocol/runjournal.py's fold_acks).

The file is a stream of msgpack frames [step index, received_ns, records(, "zlib")], where
records are the summaries' bytes (deflated, where the frame says "zlib"): a stream of
[host, component, entry] items, each entry what the step's record keeps of one ack but for
`received_ns`, which is the frame's.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import msgpack

from .wire import MAX_FRAME

ACK_JOURNAL = "run.acks"
ZLIB = "zlib"  # a frame whose records are deflated, as its first level sent them
ENTRY_FIELDS = {"status": str, "message": str, "entered_ns": int, "acked_ns": int, "started_ns": int,
                "start_ns": int, "program_start_ns": int, "start_bound_ns": int, "release_at_ns": int,
                "release_bound_ns": int, "release_missed_ns": int, "release_unsynchronised": bool,
                "release_realtime_refused": bool}


def frame(index: int, received_ns: int, records: bytes, compressed: bool = False) -> bytes:
    return msgpack.packb([index, received_ns, records, *([ZLIB] if compressed else [])], use_bin_type=True)


def entries(records: bytes, compressed: bool = False) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """The (host, component, entry) items of a summary's records (deflated, where
    `compressed`), each checked.

    Raises:
        ValueError: the records do not inflate within a frame's size, or an item is not
            [host, component, entry] of the fields a step keeps.
    """
    if compressed:
        inflater = zlib.decompressobj()
        try:
            # At most what the records could have been uncompressed: one frame's worth.
            records = inflater.decompress(records, MAX_FRAME)
        except zlib.error as exc:
            raise ValueError(f"records that do not inflate ({exc})") from None
        if inflater.unconsumed_tail or not inflater.eof:
            raise ValueError(f"records that do not inflate whole within {MAX_FRAME} bytes")
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=True)
    unpacker.feed(records)
    for item in unpacker:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
                and isinstance(item[1], str) and isinstance(item[2], dict)
                and all(isinstance(v, ENTRY_FIELDS.get(k, ())) for k, v in item[2].items())):
            raise ValueError(f"a record that is not [host, component, entry]: {str(item)[:80]}")
        yield item[0], item[1], item[2]


def step_of(tail: bytes) -> int | None:
    """The step index a frame cut short begins with, when that much of it was written."""
    unpacker = msgpack.Unpacker()
    unpacker.feed(tail)
    try:
        unpacker.read_array_header()
        index = unpacker.unpack()
    except (msgpack.OutOfData, ValueError):
        return None
    return index if isinstance(index, int) else None
