"""The instrumentation API (Datastreams' DSUI): events, intervals, counters, histograms and
sample groups, each named by (group, name) and switched on per stream by the experiment
file's enable patterns.

An entity's methods are rebound when logging starts or stops: a disabled entity's `log`
is a function that does nothing, and an enabled one's is a closure that appends a tuple
to its stream's buffer. No flag is tested on the hot path.

    SENT = nodelib.event("STIM", "send", "a request left the client")
    RTT = nodelib.interval("STIM", "rtt")
    SENT.log(seq)                 # an event, tag seq
    RTT.start(); ...; RTT.end(seq)
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from netspec.datastream.format import FIRST_ENTITY_ID, NAMESPACE
from netspec.datastream.writer import Stream, StreamConfig, StreamInfo, install_exit_hooks
from netspec.protocol import messages as m
from netspec.protocol.errors import NetspecError

_clock = time.time_ns


def _off(*args: Any, **kwargs: Any) -> None:
    """What a disabled entity's methods are."""


def _off_event(tag: int = 0, data: Any = None) -> None:
    """A disabled event's `log`: the exact signature is faster than *args."""


class Entity:
    """One instrumentation point: its namespace entry, and the streams it is enabled in."""

    __slots__ = ("decoder", "desc", "group", "id", "name", "spec", "targets")
    kind = ""

    def __init__(self, eid: int, group: str, name: str, desc: str, decoder: str | None,
                 spec: dict[str, Any]):
        self.id, self.group, self.name, self.desc = eid, group, name, desc
        self.decoder, self.spec = decoder, spec
        self.targets: list[tuple[Stream, str | None]] = []
        self._bind()

    @property
    def full_name(self) -> str:
        return f"{self.group}/{self.name}"

    @property
    def enabled(self) -> bool:
        return bool(self.targets)

    def namespace_record(self) -> tuple[Any, ...]:
        return (NAMESPACE, _clock(), self.id, self.kind, self.group, self.name, self.desc,
                self.decoder, self.spec)

    def bind(self, targets: list[tuple[Stream, str | None]]) -> None:
        """Log to these streams from now on; a target with a reason fires that ring stream's
        trigger whenever this entity logs."""
        self.targets = targets
        self._bind()

    def _bind(self) -> None:
        raise NotImplementedError

    def _put(self) -> Callable[[tuple[Any, ...]], None]:
        """Append a record to every target stream (the general, slower path)."""
        targets = self.targets

        def put(record: tuple[Any, ...]) -> None:
            for stream, reason in targets:
                stream.put(record)
                if reason is not None:
                    stream.trigger(reason)
        return put

    def _single(self) -> Stream | None:
        """The one plain target stream, when the inlined fast path applies."""
        if len(self.targets) == 1 and self.targets[0][1] is None:
            return self.targets[0][0]
        return None


class Event(Entity):
    """Something happened: `log(tag, data=None)`; data is any MessagePack value or bytes,
    unpacked in analysis by the entity's named decoder."""

    __slots__ = ("log",)
    kind = "event"

    def _bind(self) -> None:
        eid, stream = self.id, self._single()
        if not self.targets:
            self.log = _off_event
        elif stream is not None:
            buf, limit, flush = stream.buf, stream.limit, stream.flush
            append = buf.append

            def log(tag: int = 0, data: Any = None, clock: Callable[[], int] = _clock) -> None:
                if data is None:
                    append((eid, clock(), tag))
                else:
                    append((eid, clock(), tag, data))
                if len(buf) >= limit:
                    flush()
            self.log = log
        else:
            put = self._put()

            def log_all(tag: int = 0, data: Any = None) -> None:
                put((eid, _clock(), tag) if data is None else (eid, _clock(), tag, data))
            self.log = log_all


class Interval(Entity):
    """An elapsed time: `start()` then `end(tag)`, logged at the end with both times.
    Overlapping intervals of one entity (threads, pipelined requests) pass the time
    `start()` returned: `t = IV.start(); ...; IV.end(tag, t)`."""

    __slots__ = ("end", "start")
    kind = "interval"

    def _bind(self) -> None:
        if not self.targets:
            self.start = self.end = _off
            return
        eid, stream = self.id, self._single()
        started = 0

        def start(clock: Callable[[], int] = _clock) -> int:
            nonlocal started
            started = clock()
            return started

        if stream is not None:
            buf, limit, flush = stream.buf, stream.limit, stream.flush
            append = buf.append

            def end(tag: int = 0, start_ns: int | None = None,
                    clock: Callable[[], int] = _clock) -> None:
                append((eid, clock(), tag, started if start_ns is None else start_ns))
                if len(buf) >= limit:
                    flush()
        else:
            put = self._put()

            def end(tag: int = 0, start_ns: int | None = None,
                    clock: Callable[[], int] = _clock) -> None:
                put((eid, clock(), tag, started if start_ns is None else start_ns))
        self.start, self.end = start, end


class Counter(Entity):
    """A running total: `add(n)` costs no record; `log()` writes the total; `reset()`
    sets it to zero (log first to keep the total)."""

    __slots__ = ("_total", "add", "log", "reset")
    kind = "counter"

    @property
    def value(self) -> int | float:
        return self._total[0]

    def _bind(self) -> None:
        self._total = total = [0]
        if not self.targets:
            self.add = self.log = self.reset = _off
            return
        eid, put = self.id, self._put()

        def add(n: int | float = 1) -> None:
            total[0] += n

        def reset() -> None:
            total[0] = 0
        self.add, self.reset = add, reset
        self.log = lambda: put((eid, _clock(), total[0]))


class Histogram(Entity):
    """Frequencies of a value over `buckets` equal bins of [lo, hi), with one bin below
    and one above: `add(v)`, `log()` writes (counts, sum), `reset()`."""

    __slots__ = ("_counts", "add", "log", "reset")
    kind = "histogram"

    def _bind(self) -> None:
        lo, hi, n = self.spec["lo"], self.spec["hi"], self.spec["buckets"]
        scale = n / (hi - lo)
        self._counts = counts = [0] * (n + 2)
        total = [0]
        if not self.targets:
            self.add = self.log = self.reset = _off
            return
        eid, put = self.id, self._put()

        def add(v: int | float) -> None:
            if v < lo:
                counts[0] += 1
            elif v >= hi:
                counts[-1] += 1
            else:
                # min(): rounding can carry a value just under hi into bin n.
                counts[1 + min(int((v - lo) * scale), n - 1)] += 1
            total[0] += v

        def reset() -> None:
            counts[:] = [0] * (n + 2)
            total[0] = 0
        self.add, self.reset = add, reset
        self.log = lambda: put((eid, _clock(), counts[:], total[0]))

    def counts(self) -> list[int]:
        """[below lo, bin 0, ..., bin n-1, at or above hi]."""
        return list(self._counts)


class SampleGroup(Entity):
    """A row of values whose field names are declared once (CAMP samples):
    `log(values, ts=None)`, ts being when they were read if not now."""

    __slots__ = ("log",)
    kind = "samples"

    def _bind(self) -> None:
        if not self.targets:
            self.log = _off
            return
        eid, put = self.id, self._put()

        def log(values: Sequence[Any], ts: int | None = None) -> None:
            put((eid, _clock() if ts is None else ts, values))
        self.log = log


def _pattern(p: str) -> str:
    """A pattern without '/' names a group: 'STIM' means 'STIM/*'."""
    return p if "/" in p else f"{p}/*"


def selects(patterns: Sequence[str], full_name: str) -> bool:
    return any(fnmatchcase(full_name, _pattern(p)) for p in patterns)


class Datastreams:
    """The entities of a process and the streams they log to. Applications use the module's
    default instance through nodelib; netspecd keeps one per run for its node services.

    Lifecycle: entities are declared at any time (disabled); `start` opens the configured
    streams and enables what their patterns select (entities declared later are matched
    when declared); `pause` and `resume` disable and re-enable them with the files kept
    open; `stop` disables everything and closes the streams.
    """

    def __init__(self) -> None:
        self.entities: dict[tuple[str, str], Entity] = {}
        self.streams: list[Stream] = []
        self.paused = False
        self._next_id = FIRST_ENTITY_ID
        self._lock = threading.Lock()

    def event(self, group: str, name: str, desc: str = "", decoder: str | None = None) -> Event:
        """Declare an event; `decoder` names how analysis unpacks its extra data
        (docs/stream-format.md lists them)."""
        return self._declare(Event, group, name, desc, decoder, {})

    def interval(self, group: str, name: str, desc: str = "") -> Interval:
        """Declare an interval: `start()` then `end(tag)` logs its duration in ns."""
        return self._declare(Interval, group, name, desc, None, {})

    def counter(self, group: str, name: str, desc: str = "") -> Counter:
        """Declare a counter: `add(n)` logs its running total."""
        return self._declare(Counter, group, name, desc, None, {})

    def histogram(self, group: str, name: str, lo: float, hi: float, buckets: int,
                  desc: str = "") -> Histogram:
        """Declare a histogram of `buckets` equal bins over [lo, hi); `add(value)` counts a
        value and the bins are logged when the stream flushes or closes."""
        if not hi > lo or buckets < 1:
            raise NetspecError(f"histogram {group}/{name}: needs lo < hi and buckets >= 1 "
                               f"(got lo={lo}, hi={hi}, buckets={buckets})")
        return self._declare(Histogram, group, name, desc, None,
                             {"lo": lo, "hi": hi, "buckets": buckets})

    def samples(self, group: str, name: str, fields: Sequence[str], desc: str = "") -> SampleGroup:
        """Declare a sample group: `log(values)` logs one value per field at one instant."""
        return self._declare(SampleGroup, group, name, desc, None, {"fields": list(fields)})

    def _declare(self, cls: type[Any], group: str, name: str, desc: str, decoder: str | None,
                 spec: dict[str, Any]) -> Any:
        for part, what in ((group, "group"), (name, "name")):
            if not isinstance(part, str) or not part or "/" in part:
                raise NetspecError(f"entity {what} must be a non-empty string without '/', "
                                   f"got {part!r}")
        with self._lock:
            known = self.entities.get((group, name))
            if known is not None:
                if type(known) is not cls or known.spec != spec or known.decoder != decoder:
                    raise NetspecError(f"entity {group}/{name} is already declared as a "
                                       f"{known.kind} {known.spec or ''}".rstrip())
                return known
            entity = cls(self._next_id, group, name, desc, decoder, spec)
            self._next_id += 1
            self.entities[(group, name)] = entity
            if self.streams and not self.paused:
                self._enable([entity])
            return entity

    def start(self, configs: Sequence[StreamConfig], info: StreamInfo,
              exit_hooks: bool = True, paused: bool = False) -> list[Path]:
        """Open one stream per config and enable the entities each selects.

        Args:
            exit_hooks: flush on exit and SIGTERM and reopen after fork (application
                processes; a daemon closes its streams itself).
            paused: open the files but enable nothing until `resume`.

        Returns:
            The paths of the stream files.
        """
        with self._lock:
            self._close()
            if exit_hooks and configs:
                install_exit_hooks()
            self.streams = [Stream(c, info) for c in configs]
            self.paused = paused
            if not paused:
                self._enable(list(self.entities.values()))
            return [s.path for s in self.streams]

    def pause(self) -> None:
        """Disable every entity; the streams stay open for `resume`."""
        with self._lock:
            self.paused = True
            self._disable()

    def resume(self) -> None:
        with self._lock:
            self.paused = False
            self._enable(list(self.entities.values()))

    def stop(self) -> list[Path]:
        """Disable every entity and close every stream; returns the closed files."""
        with self._lock:
            return self._close()

    def _disable(self) -> None:
        for entity in self.entities.values():
            entity.bind([])

    def _close(self) -> list[Path]:
        self._disable()
        closed = [s.path for s in self.streams]
        for stream in self.streams:
            stream.close()
        self.streams = []
        return closed

    def trigger(self, reason: str) -> None:
        """Write the kept chunks of every ring stream (a no-op for normal streams)."""
        for stream in self.streams:
            stream.trigger(reason)

    def _enable(self, entities: list[Entity]) -> None:
        # Namespace records go out before an entity is bound, so no record of it can reach
        # a file ahead of the record that names it.
        chosen: list[tuple[Entity, list[tuple[Stream, str | None]]]] = []
        declared: dict[int, list[tuple[Any, ...]]] = {}
        for entity in entities:
            targets: list[tuple[Stream, str | None]] = []
            for i, stream in enumerate(self.streams):
                c, full = stream.config, entity.full_name
                if selects(c.disable, full):
                    continue
                if selects(c.trigger, full):
                    targets.append((stream, full))
                elif selects(c.enable, full):
                    targets.append((stream, None))
                else:
                    continue
                declared.setdefault(i, []).append(entity.namespace_record())
            chosen.append((entity, targets))
        for i, records in declared.items():
            self.streams[i].declare(records)
        for entity, targets in chosen:
            entity.bind(targets)


def streams_from(logging: dict[str, Any], component: str, run: str) -> tuple[list[StreamConfig], StreamInfo]:
    """The streams netspecd asks a component to open (at start_logging, or at start for a
    plain command)."""
    configs = [StreamConfig.from_wire(n, d) for n, d in logging["streams"].items()]
    return configs, StreamInfo(Path(logging["dir"]), run=run, host=logging["host"], component=component)


class ProcessStreams(Datastreams):
    """The process's own entities and streams: what nodelib's functions and the phase loop
    use. A plain command that netspecd started with streams (NETSPEC_LOGGING set, no
    NETSPEC_FD) opens them when it declares its first entity and closes them when it exits:
    importing nodelib opens nothing."""

    def __init__(self) -> None:
        super().__init__()
        self._environment_read = False

    def _declare(self, cls: type[Any], group: str, name: str, desc: str, decoder: str | None,
                 spec: dict[str, Any]) -> Any:
        if not self._environment_read:
            self._environment_read = True
            if m.LOGGING_ENV in os.environ and m.FD_ENV not in os.environ:
                self.start(*streams_from(json.loads(os.environ[m.LOGGING_ENV]),
                                         os.environ.get(m.COMPONENT_ENV, ""), os.environ.get(m.RUN_ENV, "")))
        return super()._declare(cls, group, name, desc, decoder, spec)


default = ProcessStreams()
