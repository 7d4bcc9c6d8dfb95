"""A fuzz of the stream reader with VALID checksums around bad contents, shared by
tests/datastream/test_stream_fuzz.py and bench/fuzz.py.

`craft` builds a stream file from a `Chooser`'s choices: a header (sometimes with a field of
the wrong type, a bit flipped, or none), then chunks framed as datastream/format.py frames
them, CRC and all, around records that are not what their entity declares (event data that
does not fit its decoder, short records, wrong types, histograms whose spec does not fit),
bodies that are no msgpack at all, and tails cut short or ending in a bare chunk marker.
The choices come from a seeded Random, from hypothesis (`@given(st.data())`), or from
atheris's FuzzedDataProvider, whose coverage feedback steers them (bench/fuzz.py).

`read_all` reads one file every way netspec does: `ns_control dump`'s path (the reader's
records, narrated), `StreamReader.columns()` with the numba scanner and with msgpack's
unpacker (which must agree), and the merge's source (`FileSource`, event data decoded).
What it may raise is StreamError, the whole file refused for what it is (no datastream, a
newer major version); anything else is a crash, named by where it was raised.
"""

from __future__ import annotations

import os
import random
import struct
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import msgpack
import numpy as np
from netspec.analysis.batch import Counts, Dictionaries
from netspec.analysis.narrate import narrate
from netspec.analysis.source import FileSource
from netspec.datastream.format import CHUNK_MAGIC, FORMAT_VERSION, HEADER_MAGIC, SYNC, chunk_crc
from netspec.datastream.reader import StreamReader, read_streams
from netspec.protocol.errors import StreamError


class Chooser(Protocol):
    def int(self, lo: int, hi: int) -> int: ...  # lo..hi inclusive

    def bytes(self, n: int) -> bytes: ...


class RandomChooser:
    def __init__(self, rng: random.Random):
        self.rng = rng

    def int(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def bytes(self, n: int) -> bytes:
        return self.rng.randbytes(n)


class AtherisChooser:
    """Choices read from the fuzzer's input: what coverage steers."""

    def __init__(self, fdp: Any):
        self.fdp = fdp

    def int(self, lo: int, hi: int) -> int:
        return self.fdp.ConsumeIntInRange(lo, hi)

    def bytes(self, n: int) -> bytes:
        return self.fdp.ConsumeBytes(n).ljust(n, b"\0")


def pick(ch: Chooser, items: Sequence[Any]) -> Any:
    return items[ch.int(0, len(items) - 1)]


def chance(ch: Chooser, percent: int) -> bool:
    """True `percent` times in 100; False for a chooser that has run out (atheris's input,
    hypothesis shrinking): the plain path is where choices of 0 lead."""
    return ch.int(0, 99) >= 100 - percent


# -- the file

KINDS = ["event", "interval", "counter", "histogram", "samples", "fz-kind"]
DECODERS = [None, None, "msgpack", "utf8", "json", "struct:<I", "struct:<Id", "struct:!!", "os:system", ""]
TS = 1_795_000_000_000_000_000


def odd(ch: Chooser) -> Any:
    """A value of the wrong type, or an edge."""
    return pick(ch, [None, True, -1, 0, 2**64 - 1, -(2**63), 1.5, float("nan"), "", "fz", b"", b"\xff\xfe",
                     [], [1, 2], {}, {"k": 1}, 10**6])


def header(ch: Chooser) -> bytes:
    h: dict[str, Any] = {"magic": HEADER_MAGIC, "version": list(FORMAT_VERSION), "stream": "fz",
                         "run": "fz-run", "host": "fz-host", "component": "fz", "pid": 1, "parent_pid": None,
                         "clock": "CLOCK_REALTIME", "created_ns": TS, "mode": pick(ch, ["normal", "ring"]),
                         "ring_chunks": 0, "chunk_records": 4096}
    for _ in range(pick(ch, [0, 0, 0, 1, 2])):
        key = pick(ch, [*h, "version", "version", "created_ns"])
        h[key] = pick(ch, [odd(ch), [1], [], ["1", "0"], [1, 0, 0], "1.0", 1, [2, 0], [1, 9], None])
    data = msgpack.packb(h, use_bin_type=True)
    how = ch.int(0, 19)
    if how == 19:
        return b""  # no header: chunks alone
    if how == 18:
        return ch.bytes(ch.int(1, 40))
    if how == 17:  # one bit flipped anywhere in it (the version byte among others)
        at = ch.int(0, len(data) - 1)
        return data[:at] + bytes([data[at] ^ (1 << ch.int(0, 7))]) + data[at + 1:]
    return data


class Entity:
    def __init__(self, eid: Any, kind: Any, decoder: Any, spec: Any):
        self.eid, self.kind, self.decoder, self.spec = eid, kind, decoder, spec


def entities(ch: Chooser) -> list[Entity]:
    found = []
    for n in range(ch.int(1, 5)):
        kind = pick(ch, KINDS)
        spec: Any = {}
        if kind == "histogram":
            spec = pick(ch, [{"lo": 0, "hi": 10, "buckets": 4}, {"lo": 0, "hi": 10, "buckets": 0},
                             {"lo": 5, "hi": 5, "buckets": 2}, {"lo": "a", "hi": 1, "buckets": 2}, {}, None])
        elif kind == "samples":
            spec = pick(ch, [{"fields": ["a", "b"]}, {"fields": 5}, {"fields": None}, "fz", None])
        eid = odd(ch) if chance(ch, 10) else 16 + n
        found.append(Entity(eid, kind, pick(ch, DECODERS) if kind == "event" else None, spec))
    return found


def namespace(ch: Chooser, e: Entity) -> list[Any]:
    record = [0, TS, e.eid, e.kind, "FZ", f"e{e.eid}", "", e.decoder, e.spec]
    if chance(ch, 8):
        record = record[:ch.int(1, 8)]  # short
    elif chance(ch, 8):
        record[ch.int(2, 8)] = odd(ch)
    return record


def event_data(ch: Chooser, decoder: Any) -> Any:
    """Data that fits its decoder, or does not."""
    good = {"utf8": b"fz", "json": b'{"a": 1}', "struct:<I": struct.pack("<I", 7),
            "struct:<Id": struct.pack("<Id", 7, 1.5)}.get(decoder, 5)
    return pick(ch, [good, good, b"\xff\xfe", b"{not json", b"\x01", b"", "text", 7, None, [1], {"a": b"x"},
                     b"\xc1"])


def record(ch: Chooser, e: Entity) -> Any:
    ts = odd(ch) if chance(ch, 10) else TS + ch.int(0, 10**9)
    kind = e.kind
    if kind == "event":
        r = [e.eid, ts, ch.int(0, 100)] + ([] if chance(ch, 30) else [event_data(ch, e.decoder)])
    elif kind == "interval":
        r = [e.eid, ts, 1, odd(ch) if chance(ch, 20) else TS]
    elif kind == "counter":
        r = [e.eid, ts, odd(ch) if chance(ch, 20) else ch.int(0, 10**6)]
    elif kind == "histogram":
        r = [e.eid, ts, odd(ch) if chance(ch, 20) else [ch.int(0, 3) for _ in range(ch.int(0, 7))], 1.5]
    else:
        r = [e.eid, ts, odd(ch) if chance(ch, 20) else [ch.int(0, 9), 2.5]]
    if chance(ch, 10):
        r = r[:ch.int(0, 3)]  # short
    elif chance(ch, 5):
        r = odd(ch)  # not a record at all
    return r


def admin(ch: Chooser) -> list[Any]:
    eid = ch.int(1, 3)
    r = [[1, TS, 3, "write failed"], [2, TS, "fz", 2, 0], [3, TS, 10, 2, 0]][eid - 1]
    if chance(ch, 30):
        r[ch.int(2, len(r) - 1)] = odd(ch)
    if chance(ch, 10):
        r = r[:ch.int(1, len(r) - 1)]
    return r


def body(ch: Chooser, ents: list[Entity]) -> tuple[bytes, int]:
    """A chunk's body and the count its frame will say."""
    if chance(ch, 8):  # not msgpack records at all, or cut short, under a valid CRC all the same
        raw = ch.bytes(ch.int(1, 48))
        starts = [b"", b"\x91", b"\x92\x93", b"\x91\xc4", b"\x91\x93\x10\xcf", b"\xdd\xff\xff\xff\xff"]
        return pick(ch, starts) + raw, ch.int(0, 3)
    records: list[Any] = []
    for _ in range(ch.int(0, 6)):
        what = ch.int(0, 9)
        if what == 9 or not ents:
            records.append(admin(ch))
        elif what >= 7:
            e = pick(ch, ents)
            records.append(namespace(ch, e))
        else:
            records.append(record(ch, pick(ch, ents)))
    data = msgpack.packb(records, use_bin_type=True)
    count = len(records) + pick(ch, [-1, 1, 2**31]) if chance(ch, 10) else len(records)
    return data, max(count, 0)


def chunk(seq: int, count: int, data: bytes, crc: int | None = None) -> bytes:
    crc = chunk_crc(seq, count, data) if crc is None else crc
    return msgpack.packb([CHUNK_MAGIC, seq, count, crc, data], use_bin_type=True)


def craft(ch: Chooser) -> bytes:
    """A stream file: a header, then chunks with valid checksums around bad contents."""
    out = [header(ch)]
    ents = entities(ch)
    seq = 0
    for _ in range(ch.int(1, 6)):
        seq = pick(ch, [seq, seq + 3, 0, 2**32, 2**64 - 1]) if chance(ch, 20) else seq + 1
        data, count = body(ch, ents)
        if count >= 2**32:
            count = 2**32 - 1
        crc = ch.int(0, 2**32 - 1) if chance(ch, 5) else None
        out.append(chunk(min(seq, 2**64 - 1), count, data, crc))
    file = b"".join(out)
    tail = ch.int(0, 9)
    if tail == 9:
        file += SYNC  # the bare 7-byte chunk marker
    elif tail == 8:
        file += SYNC + pick(ch, [b"\xcf", b"\x01\xce\x00", b"\x01\x01\xce\x00\x00\x00\x01\xc6"])
    elif tail == 7 and file:
        file = file[:ch.int(0, len(file) - 1)]  # cut short
    elif tail == 6 and file:
        at = ch.int(0, len(file) - 1)  # one byte changed
        file = file[:at] + bytes([ch.int(0, 255)]) + file[at + 1:]
    return file


# -- reading it every way netspec does

REFUSED = (StreamError,)  # the whole file, for what it is: documented, not a crash


def _dump(path: Path) -> int:
    readers: list[StreamReader] = []
    return sum(1 for _ in narrate(readers, read_streams([path], readers)))


def _columns(path: Path, compiled: bool) -> list[tuple[Any, Any]]:
    reader = StreamReader(path)
    return [(seq, None if seq is None else (item.ints.copy(), item.items.copy()))
            for seq, item in reader.columns(compiled)]


def _merge(path: Path, compiled: bool) -> int:
    return sum(len(batch) for batch in FileSource(path, "fz-host", None, Dictionaries(), Counts(),
                                                  compiled=compiled))


def targets(compiled: bool) -> dict[str, Callable[[Path], Any]]:
    found: dict[str, Callable[[Path], Any]] = {
        "dump": _dump, "columns/unpacker": lambda p: _columns(p, False),
        "merge/unpacker": lambda p: _merge(p, False)}
    if compiled:
        found["columns/scanner"] = lambda p: _columns(p, True)
        found["merge/scanner"] = lambda p: _merge(p, True)
    return found


def signature(where: str, exc: BaseException) -> str:
    """A crash named by its reader, type and the innermost netspec line it came from."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "netspec" in f.filename
              or "/datastream/" in f.filename or "/analysis/" in f.filename]
    at = f"{Path(frames[-1].filename).name}:{frames[-1].lineno} {frames[-1].name}" if frames else "?"
    return f"{where}: {type(exc).__name__} at {at}"


def read_all(path: Path, compiled: bool = True) -> dict[str, str]:
    """Read the file every way; returns {signature: message} of each crash (none if all is well),
    and, as a crash of its own, where the scanner and the unpacker disagree."""
    crashes: dict[str, str] = {}
    results: dict[str, Any] = {}
    for where, read in targets(compiled).items():
        try:
            results[where] = read(path)
        except REFUSED:
            results[where] = "refused"
        except Exception as exc:
            crashes[signature(where, exc)] = f"{type(exc).__name__}: {str(exc)[:200]}"
    scanner, unpacker = results.get("columns/scanner"), results.get("columns/unpacker")
    if isinstance(scanner, list) and isinstance(unpacker, list) and not _same(scanner, unpacker):
        crashes["columns: the scanner and the unpacker disagree"] = (
            f"scanner chunks {[s for s, _ in scanner]}, unpacker {[s for s, _ in unpacker]}")
    return crashes


def _same(a: list[tuple[Any, Any]], b: list[tuple[Any, Any]]) -> bool:
    if [s for s, _ in a] != [s for s, _ in b]:
        return False
    return all(x is None or (np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]))
               for (_, x), (_, y) in zip(a, b, strict=True))


def write(directory: Path, data: bytes, n: int = 0) -> Path:
    """The file under the name a writer gives one (STREAM.COMPONENT.PID.ds)."""
    path = directory / f"fz.fz.{os.getpid()}-{n}.ds"
    path.write_bytes(data)
    return path
