"""The datastream writer: one binary file per process and stream, written in framed chunks.

The format (a header map, then framed and checksummed chunks of records) is format.py's;
a reader checks every chunk and skips a damaged one.

Records have the forms schema.py declares: its Structs, or tuples in their order (an
event's and an interval's, built inline by the entities). They are buffered and encoded a
chunk at a time (msgspec encodes the same MessagePack bytes as the msgpack package about
four times faster; bench/events.py). A chunk is written when full or by the flusher thread
after `flush_ms`, so a killed process loses at most the records of one chunk. Ring streams
keep their last chunks in memory and write them only when a trigger fires.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from netspec.protocol.kinds import StreamSpec

from . import process
from .format import (
    CHUNK_MAGIC,
    CLOCK,
    DEFAULT_CHUNK_RECORDS,
    DEFAULT_FLUSH_MS,
    FORMAT_VERSION,
    HEADER_MAGIC,
    chunk_crc,
)
from .schema import CloseRecord, DroppedRecord, Header, NamespaceRecord, TriggerRecord

_encode = msgspec.msgpack.Encoder().encode
# How many files each stream name has had in this process (logging windows).
_windows: dict[Path, int] = {}


@dataclass(frozen=True)
class StreamConfig:
    """One stream as the experiment file's `streams:` section describes it."""

    name: str
    enable: tuple[str, ...] = ()
    disable: tuple[str, ...] = ()
    ring_chunks: int = 0
    trigger: tuple[str, ...] = ()
    chunk_records: int = DEFAULT_CHUNK_RECORDS
    flush_ms: int = DEFAULT_FLUSH_MS
    components: tuple[str, ...] | None = None

    @classmethod
    def from_wire(cls, name: str, spec: StreamSpec) -> StreamConfig:
        """The stream `setup` describes (typed where its frame was read: protocol/kinds.py)."""
        comps = None if spec.components is None else tuple(spec.components)
        return cls(name, tuple(spec.enable), tuple(spec.disable), spec.ring_chunks, tuple(spec.trigger),
                   spec.chunk_records, spec.flush_ms, comps)

    @classmethod
    def from_map(cls, name: str, d: dict[str, Any]) -> StreamConfig:
        """The stream a plain map describes (the experiment file's, checked by its schema; the
        one netspecd hands a component in its environment), read as `setup`'s StreamSpec.

        Raises:
            msgspec.ValidationError: a field of the wrong type, named.
        """
        return cls.from_wire(name, msgspec.convert(d, StreamSpec))

    def wire(self) -> dict[str, Any]:
        """As a plain map (run.json's plan, a component's environment)."""
        return msgspec.to_builtins(self.spec())

    def spec(self) -> StreamSpec:
        """As `setup` sends it."""
        return StreamSpec(enable=list(self.enable), disable=list(self.disable), ring_chunks=self.ring_chunks,
                          trigger=list(self.trigger), chunk_records=self.chunk_records,
                          flush_ms=self.flush_ms,
                          components=None if self.components is None else list(self.components))


@dataclass
class StreamInfo:
    """Who writes a stream; goes into the header of every file."""

    directory: Path
    run: str = ""
    host: str = ""
    component: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Stream:
    """One open stream file of this process.

    Lifecycle: created open (header written), records are `put`, chunks leave by `flush`
    (when full, by the flusher thread, at exit or on SIGTERM), `close` (or the end of a
    `with` block) writes the clean close record; the last stream of the process to close
    ends the flusher thread too. After a fork the child reopens its own file
    (`_reopen_in_child`).
    """

    def __init__(self, config: StreamConfig, info: StreamInfo):
        self.config, self.info = config, info
        self.buf: list[Any] = []  # records: tuples in schema.py's order, or its Structs
        self.limit = config.chunk_records
        self.lock = threading.Lock()
        self.ring: deque[tuple[int, bytes]] | None = (
            deque(maxlen=config.ring_chunks) if config.ring_chunks else None)
        self.declared: dict[int, NamespaceRecord] = {}  # entity id -> its namespace record
        self.closed = False
        self.warned_encoding = False
        self.fd: int | None = None
        self.parent_pid: int | None = None
        self.seq = self.records = self.chunks = self.dropped = self.ring_discarded = 0
        self.flushed_ns = time.monotonic_ns()
        self._open()
        process.live_streams.add(self)
        process.flusher.ensure_running()

    def _open(self) -> None:
        self.pid = os.getpid()
        who = self.info.component or "process"
        self.info.directory.mkdir(parents=True, exist_ok=True)
        # A second logging window of the same process gets a file of its own, never the
        # first one's: NAME.WHO.PID.ds, then NAME.WHO.PID-2.ds, ...
        stem = self.info.directory / f"{self.config.name}.{who}.{self.pid}"
        for n in itertools.count(_windows.get(stem, 0) + 1):
            self.path = stem.with_name(stem.name + (f"-{n}" if n > 1 else "") + ".ds")
            try:
                self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
                                  | os.O_CLOEXEC, 0o644)
            except FileExistsError:
                continue
            _windows[stem] = n
            break
        header = Header(HEADER_MAGIC, list(FORMAT_VERSION), self.config.name, self.info.run, self.info.host,
                        self.info.component, self.pid, self.parent_pid, CLOCK, time.time_ns(),
                        "ring" if self.ring is not None else "normal", self.config.ring_chunks, self.limit)
        self._write(_encode({**msgspec.structs.asdict(header), **self.info.extra}), 0)
        if self.declared:
            self._write_chunk(list(self.declared.values()))

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def put(self, record: Any) -> None:
        """Append one record (the slow path; entities inline this)."""
        self.buf.append(record)
        if len(self.buf) >= self.limit:
            self.flush()

    def declare(self, records: list[NamespaceRecord]) -> None:
        """Write namespace records now, ahead of any buffered use, bypassing the ring: a
        ring that drops chunks must never drop what names its entities. An entity already
        declared in this file is not declared again."""
        with process.flushing(self):
            new = [r for r in records if r.entity not in self.declared]
            if new:
                self.declared.update((r.entity, r) for r in new)
                self._write_chunk(new)

    def flush(self) -> None:
        """Turn buffered records into a chunk: written, or kept in the ring."""
        with process.flushing(self):
            self._flush_locked()

    def _flush_locked(self) -> None:
        # Copy then delete the copied prefix: records appended meanwhile by other threads
        # stay in the buffer for the next chunk.
        self.flushed_ns = time.monotonic_ns()
        records = self.buf[:]
        del self.buf[:len(records)]
        if not records or self.closed:
            return
        if self.ring is None:
            self._write_chunk(records)
        else:
            if len(self.ring) == self.ring.maxlen:
                self.ring_discarded += 1
            self.ring.append((len(records), self._chunk(records)))

    def trigger(self, reason: str) -> None:
        """Write a ring stream's kept chunks, then a trigger record; the ring starts over."""
        if self.ring is None:
            return
        with process.flushing(self):
            self._flush_locked()
            for count, chunk in self.ring:
                self._write(chunk, count)
            self._write_chunk([TriggerRecord(time.time_ns(), reason, len(self.ring), self.ring_discarded)])
            self.ring.clear()
            self.ring_discarded = 0

    def close(self) -> None:
        """Flush, write the clean close record and close the file. Idempotent."""
        process.live_streams.discard(self)
        try:
            with process.flushing(self):
                self._close_locked()
        finally:
            process.flusher.stop_if_idle()

    def _close_locked(self) -> None:
        if self.closed:
            return
        if self.fd is None and not self.buf:
            self.closed = True  # a forked child that logged nothing leaves no file
            return
        self._flush_locked()
        unwritten = (len(self.ring) if self.ring is not None else 0) + self.ring_discarded
        self._write_chunk([CloseRecord(time.time_ns(), self.records, self.chunks, unwritten)])
        self.closed = True
        if self.fd is not None:
            os.close(self.fd)

    def _chunk(self, records: list[Any]) -> bytes:
        if self.fd is None:
            self._open()  # a forked child's first chunk: its file, header and namespace first
        try:
            body = _encode(records)
        except (TypeError, OverflowError):
            records = self._encodable(records)
            body = _encode(records)
        self.seq += 1
        return _encode((CHUNK_MAGIC, self.seq, len(records), chunk_crc(self.seq, len(records), body),
                        body))

    def _encodable(self, records: list[Any]) -> list[Any]:
        """The records MessagePack can carry, and a dropped record counting the others: one
        bad value (an object, an int over 64 bits) must not cost its whole chunk."""
        good, bad = [], None
        for record in records:
            try:
                _encode(record)
                good.append(record)
            except (TypeError, OverflowError) as exc:
                bad = (bad[0] + 1, bad[1]) if bad else (1, f"{type(exc).__name__}: {exc}")
        if bad is None:
            return good
        reason = f"not MessagePack data ({bad[1]})"
        if not self.warned_encoding:
            self.warned_encoding = True
            print(f"netspec: stream {self.path}: records dropped: {reason}", file=sys.stderr)
        return [DroppedRecord(time.time_ns(), bad[0], reason), *good]

    def _write_chunk(self, records: list[Any]) -> None:
        if self.dropped:
            # Said before anything else once the file takes writes again.
            records = [DroppedRecord(time.time_ns(), self.dropped, "write failed"), *records]
            self.dropped = 0
        self._write(self._chunk(records), len(records))

    def _write(self, data: bytes, count: int) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as exc:
            # Keep the process running; the loss is counted and written as a record later.
            if not self.dropped:
                print(f"netspec: stream {self.path}: {exc.strerror}; records are being dropped",
                      file=sys.stderr)
            self.dropped += count
            return
        if count:
            self.records += count
            self.chunks += 1

    def _reopen_in_child(self) -> None:
        """After fork: the parent writes what was buffered; the child gets its own file,
        with the same namespace, at its first write, so a child that only execs (a
        subprocess) leaves no empty file behind."""
        if self.fd is not None:
            os.close(self.fd)
        self.fd, self.parent_pid = None, self.pid
        self.seq = self.records = self.chunks = self.dropped = self.ring_discarded = 0
        self.lock = threading.Lock()
        self.buf.clear()
        if self.ring is not None:
            self.ring.clear()

