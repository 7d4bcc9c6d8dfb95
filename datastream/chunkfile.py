"""A stream file read as its chunks (docs/stream-format.md): the file mapped while a pass over
it runs, its header (decoded once into a schema.Header), each chunk's frame checked (marker,
sequence number, count, CRC, body length), damage skipped by resynchronising on the next
chunk marker, and every loss counted and said.

A damaged chunk is skipped and the pass resumes at the next chunk that reads whole; a file
cut short ends at its last whole chunk. What a chunk's records are is the caller's: a
`decode(body, count)` makes them (datastream.reader's StreamReader reads them as records,
its `columns` as columns.Columns). No byte string makes a ChunkFile raise but StreamError,
for a file that is not a stream.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

import msgpack
import msgspec
from netspec.protocol.errors import StreamError

from .format import FORMAT_VERSION, HEADER_MAGIC, SYNC, chunk_crc
from .records import fits, holds_close
from .schema import Header

_decode = msgspec.msgpack.decode
# The smallest record is three bytes (a fixarray of two fixints), after the body's own array
# header: a chunk that says it holds more records than its body has room for is damaged,
# whatever its CRC (nothing is allocated for a count a file states).
MIN_RECORD_BYTES = 3
SPANNING_CHECKED = 4
_HEADER_FIELDS = msgspec.structs.fields(Header)
_VERSION = next(f.type for f in _HEADER_FIELDS if f.name == "version")


class _Damaged(Exception):
    pass


def _uint(buf: bytes | mmap.mmap, o: int) -> tuple[int, int]:
    if o >= len(buf):
        raise _Damaged("file ends inside a chunk frame")
    b = buf[o]
    if b <= 0x7F:
        return b, o + 1
    width = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}.get(b)
    if width is None or o + 1 + width > len(buf):
        raise _Damaged("bad integer")
    return int.from_bytes(buf[o + 1:o + 1 + width], "big"), o + 1 + width


def _bin_len(buf: bytes | mmap.mmap, o: int) -> tuple[int, int]:
    width = {0xC4: 1, 0xC5: 2, 0xC6: 4}.get(buf[o]) if o < len(buf) else None
    if width is None or o + 1 + width > len(buf):
        raise _Damaged("bad body length")
    return int.from_bytes(buf[o + 1:o + 1 + width], "big"), o + 1 + width


def typed_header(raw: dict[Any, Any]) -> tuple[Header, list[str]]:
    """The Header of a header map whose magic and version are good, and the keys it gives a
    value of another type than schema.Header declares: those are left at their defaults.
    Keys it does not declare (a writer's own, a newer minor version's) are ignored."""
    said, misfits = {}, []
    for f in _HEADER_FIELDS:
        if f.name in raw:
            if fits(raw[f.name], f.type):
                said[f.name] = raw[f.name]
            else:
                misfits.append(f.name)
    return msgspec.convert(said, Header), sorted(misfits)


def _records_list(body: bytes, count: int) -> list[Any]:
    records = _decode(body)
    if not isinstance(records, list) or len(records) != count:
        raise ValueError(f"not {count} records")
    return records


class ChunkFile:
    """One stream file as its header and chunks, and what was lost of them.

    Lifecycle: opening reads the header; each pass over the chunks (`chunks`) maps the file
    and unmaps it when the pass ends, is closed or is dropped, so a ChunkFile holds no map
    and no file between passes, nor after one read to its end. `close` ends a pass still
    running. Use it as a context manager all the same, so a pass left half read is ended
    where the block ends.

    Raises:
        StreamError: the file is not a netspec datastream, or its format is newer than
            this reader's major version.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.warnings: list[str] = []
        self.closed_cleanly: bool | None = None  # known once the records were read
        self.records_lost = 0  # lost with damaged chunks, dropped by the writer, or malformed
        self.duplicate_chunks = 0  # chunks whose sequence number came before: read once
        self._passes = 0  # passes over the chunks under way: the map is held while any is
        self.header_damaged = False  # the header did not read: `header` is the file name's
        self._data: bytes | mmap.mmap = self._map()
        try:
            self.header, self._body_at = self._read_header()
        finally:
            self.close()

    def _map(self) -> bytes | mmap.mmap:
        """The file's bytes, mapped (the map holds its own descriptor; the file's is closed)."""
        with open(self.path, "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if self.path.stat().st_size else b""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Unmap the file, ending any pass still running; idempotent. Records already read
        stay valid, and a later pass maps the file again."""
        data, self._data, self._passes = self._data, b"", 0
        if isinstance(data, mmap.mmap):
            data.close()

    def _read_header(self) -> tuple[Header, int]:
        """The header, decoded once into a schema.Header (a key of the wrong type said and
        left at its default), and where the chunks begin."""
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        unpacker.feed(self._data[:64 * 1024])
        try:
            raw = unpacker.unpack()
        # TypeError: a map with a list for a key, which msgpack cannot hash.
        except (msgpack.OutOfData, ValueError, TypeError, msgpack.UnpackException):
            return self._header_lost("no header")
        if not isinstance(raw, dict) or raw.get("magic") != HEADER_MAGIC:
            return self._header_lost("bad header magic")
        if not fits(raw.get("version"), _VERSION):
            return self._header_lost(f"bad version {raw.get('version')!r}")
        header, misfits = typed_header(raw)
        major, minor = header.version[:2]
        if major > FORMAT_VERSION[0]:
            raise StreamError(str(self.path), f"stream format {major}.{minor} is newer "
                              f"than this netspec reads ({FORMAT_VERSION[0]}.x); "
                              "upgrade netspec to read it")
        if misfits:
            self.warn(f"the header's {', '.join(misfits)} not of their kind: ignored")
        return header, unpacker.tell()

    def _header_lost(self, why: str) -> tuple[Header, int]:
        """A damaged header: the chunks after it are read all the same, from the first chunk
        marker on; what the header said is taken from the file's name (stream.component.pid)."""
        at = self._data.find(SYNC)
        if at == -1:
            raise StreamError(str(self.path), f"not a netspec datastream ({why}, and no chunk in it)")
        stream, _, rest = self.path.stem.partition(".")
        self.warn(f"the header is damaged ({why}): read from the first chunk on, at byte {at}; "
                  f"stream and component taken from the file's name")
        self.header_damaged = True
        component = rest.rpartition(".")[0] or rest
        return Header(HEADER_MAGIC, list(FORMAT_VERSION), stream, component=component), at

    def chunks(self, decode: Callable[[bytes, int], Any] | None = None) -> Iterator[tuple[int | None, Any]]:
        """(seq, records) for every good chunk, in file order, and (None, {records,
        reason}) where something was lost. `decode(body, count)` makes the records of a
        chunk's body (default: a list of record lists); it raises ValueError if the body
        does not hold `count` records. Once the chunks are read, a file without a clean
        close record is said in `warnings`, whoever reads it."""
        decode = decode or _records_list
        if not self._passes:
            self._data = self._map()
        data = self._data
        self._passes += 1
        try:
            yield from self._read_chunks(decode)
        finally:
            # The last pass to end unmaps the file; one that `close` ended counts no more.
            if self._data is data and self._passes:
                self._passes -= 1
                if not self._passes:
                    self.close()

    def _read_chunks(self, decode: Callable[[bytes, int], Any]) -> Iterator[tuple[int | None, Any]]:
        buf, o, last_seq = self._data, self._body_at, 0
        # A damaged header leaves the first chunk's number unknown: no gap is counted before it.
        ring = self.header.ring
        first = self.header_damaged
        seen: set[int] = set()
        self.duplicate_chunks = 0
        # Resynchronising checks candidate chunks; those whose bodies hold no other marker
        # do not overlap, so checking them costs the file once. A crafted file of markers
        # whose bodies each span the rest would cost its length squared: such bodies are
        # checked up to a few times the file's length, then refused.
        self._spanning = SPANNING_CHECKED * len(buf) + (1 << 20)
        while o < len(buf):
            try:
                seq, records, end = self._chunk_at(o, decode)
            except _Damaged as exc:
                o, loss, last_seq = self._resync(o, last_seq, ring, str(exc), decode)
                yield None, loss
                continue
            o = end
            if seq in seen:
                self.duplicate_chunks += 1
                continue
            seen.add(seq)
            if not ring and not first and seq > last_seq + 1:
                yield None, self._lost(None, f"chunks {last_seq + 1}-{seq - 1} missing")
            first = False
            last_seq = seq
            if holds_close(records):
                self.closed_cleanly = True
            yield seq, records
        if self.duplicate_chunks:
            self.warn(f"{self.duplicate_chunks} chunk(s) appear more than once: each read once")
        if not self.closed_cleanly:
            self.closed_cleanly = False
            self.warn("no clean close record: the writer was killed or is still running "
                      "(records it still held in memory, at most one chunk, are not in the file)")

    def _chunk_at(self, o: int, decode: Callable[[bytes, int], Any],
                  marker: int = -1) -> tuple[int, Any, int]:
        """The chunk at `o`: (seq, its records decoded, where it ends). `marker`: where the
        next chunk marker after `o` is, when resynchronising; a body that would span it is
        checked only while the file's budget for such bodies lasts."""
        buf = self._data
        if buf[o:o + len(SYNC)] != SYNC:
            raise _Damaged("no chunk marker")
        seq, p = _uint(buf, o + len(SYNC))
        count, p = _uint(buf, p)
        crc, p = _uint(buf, p)
        size, p = _bin_len(buf, p)
        if p + size > len(buf):
            raise _Damaged(f"file ends inside chunk {seq}")
        if marker != -1 and p + size > marker:
            if size > self._spanning:
                raise _Damaged(f"chunk {seq} spans other chunk markers, past what is checked of them")
            self._spanning -= size
        body = buf[p:p + size]
        if count >> 32 or chunk_crc(seq, count, body) != crc:
            raise _Damaged(f"chunk {seq} fails its CRC")
        if MIN_RECORD_BYTES * count > max(size - 1, 0):
            raise _Damaged(f"chunk {seq} says {count} records, more than its {size} bytes hold")
        try:
            return seq, decode(body, count), p + size
        except ValueError:
            raise _Damaged(f"chunk {seq} holds other than its {count} records") from None

    def _resync(self, o: int, last_seq: int, ring: bool, why: str,
                decode: Callable[[bytes, int], Any]) -> tuple[int, dict[str, Any], int]:
        """Skip to the next chunk that reads whole. Returns where it is, what was lost, and
        the sequence number that chunk follows (so the gap is not counted twice)."""
        buf, at = self._data, o + 1
        while (at := buf.find(SYNC, at)) != -1:
            try:
                seq, *_ = self._chunk_at(at, decode, buf.find(SYNC, at + 1))
            except _Damaged:
                at += 1
                continue
            if ring or seq == last_seq + 2:
                loss = self._lost(self._declared_count(o, last_seq + 1), f"{why}; skipped {at - o} bytes")
            else:
                loss = self._lost(None, f"{why}; chunks {last_seq + 1}-{seq - 1} lost ({at - o} bytes)")
            return at, loss, seq - 1
        return len(buf), self._lost(self._declared_count(o, last_seq + 1), f"{why}; the rest of the file "
                                    f"({len(buf) - o} bytes) is unreadable"), last_seq

    def _declared_count(self, o: int, seq: int) -> int | None:
        """The record count a damaged chunk's frame says it had, trusted only if the frame
        carries the sequence number expected there (in a ring stream, any)."""
        try:
            found, p = _uint(self._data, o + len(SYNC))
            count = _uint(self._data, p)[0]
        except _Damaged:
            return None
        ring = self.header.ring
        return count if (ring or found == seq) and not count >> 32 else None

    def _lost(self, records: int | None, reason: str) -> dict[str, Any]:
        self.records_lost += records or 0
        counted = f"lost {records} records" if records is not None else "lost an unknown number of records"
        self.warn(f"{counted}: {reason}")
        return {"records": records, "reason": reason}

    def warn(self, text: str) -> None:
        self.warnings.append(f"{self.path}: {text}")
