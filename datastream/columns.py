"""Columnar decoding of a chunk body: the records' leading integers become numpy columns
without a Python object per record.

A record is a MessagePack array led by integers: [entity id, ts, a2, a3, ...]. What most
records are (an event [id, ts, tag], an interval [id, ts, tag, start], a counter [id, ts,
total], as schema.py declares them) is all integers, so the scanner reads the first
INT_ITEMS items (up to the last place where schema.py's entity records hold an integer)
where they are integers and notes where each record lies in the body; the few records with
other items (extra event data, samples, histograms, namespace records) are decoded one by
one from those offsets.
Compiled with numba (datastream.scanner): decoding every record through Python objects runs
at 4-5 M records/s here, this at several times that. But numba takes about a second to start
in a process, longer than a small run's whole merge: below COMPILED_FROM_BYTES of streams the
same columns come from msgpack's own unpacker, record by record.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgpack
import numpy as np

from .records import INT64, MISSING
from .schema import INT_ITEMS

# A merge of this many stream bytes or more decodes with the compiled scanner: where the
# unpacker's extra time per record outweighs numba's start (both about 1.5 s at 4.7 MB here).
COMPILED_FROM_BYTES = 4 << 20


@dataclass
class Columns:
    """The records of one chunk: `ints[:, k]` is item k of each record, for k below
    INT_ITEMS (MISSING where absent or not an integer; schema.at names the items), `items`
    each record's length, `spans` where it lies in `body`."""

    ints: np.ndarray
    items: np.ndarray
    spans: np.ndarray
    body: bytes

    def __len__(self) -> int:
        return len(self.items)

    @classmethod
    def concat(cls, parts: list[Columns]) -> Columns:
        """Several chunks' columns as one, their bodies end to end."""
        if len(parts) == 1:
            return parts[0]
        shift = np.cumsum([0] + [len(p.body) for p in parts[:-1]])
        return cls(np.concatenate([p.ints for p in parts]), np.concatenate([p.items for p in parts]),
                   np.concatenate([p.spans + k for p, k in zip(parts, shift, strict=True)]),
                   b"".join(p.body for p in parts))


def _room_for(body: bytes, count: int) -> None:
    """Refuse a count the body has no room for before allocating its columns: a record is
    three bytes at least (a fixarray of two fixints)."""
    if count < 0 or 3 * count > max(len(body) - 1, 0):
        raise ValueError(f"a body of {len(body)} bytes cannot hold {count} records")


def scan(body: bytes, count: int) -> Columns:
    """The columns of a chunk body holding `count` records, by the compiled scanner.

    Raises:
        ValueError: the body is not a MessagePack array of `count` record arrays.
    """
    from .scanner import scan_body

    _room_for(body, count)
    buf = np.frombuffer(body, dtype=np.uint8)
    out = np.empty((count, INT_ITEMS + 1), dtype=np.int64)
    offsets = np.empty((count, 2), dtype=np.int64)
    n = scan_body(buf, out, offsets) if len(buf) else -1
    if n != count:
        raise ValueError(f"chunk body does not hold {count} records")
    return Columns(out[:, :INT_ITEMS], out[:, INT_ITEMS], offsets, body)


def unpack(body: bytes, count: int) -> Columns:
    """`scan`'s columns, read by msgpack's unpacker: no compiler to start. Strings stay bytes,
    as the scanner skips them unread."""
    _room_for(body, count)
    unpacker = msgpack.Unpacker(raw=True, strict_map_key=False)
    unpacker.feed(body)
    out = np.full((count, INT_ITEMS + 1), MISSING, dtype=np.int64)
    offsets = np.empty((count, 2), dtype=np.int64)
    try:
        if unpacker.read_array_header() != count:
            raise ValueError
        start = unpacker.tell()
        for i in range(count):
            record = unpacker.unpack()
            # Not a record (no array of an id and a time): its columns stay MISSING, for the
            # reader to count as malformed, as the scanner leaves them.
            is_record = isinstance(record, list) and len(record) >= 2
            out[i, INT_ITEMS] = len(record) if isinstance(record, list) else 0
            for k, item in enumerate(record[:INT_ITEMS] if is_record else ()):
                if type(item) is int and item in INT64:
                    out[i, k] = item
            end = unpacker.tell()
            offsets[i] = start, end
            start = end
        if start != len(body):
            raise ValueError("bytes after the records")
    except Exception as exc:  # msgpack's errors are of several kinds; all mean the same here
        raise ValueError(f"chunk body does not hold {count} records") from exc
    return Columns(out[:, :INT_ITEMS], out[:, INT_ITEMS], offsets, body)
