"""The instrumentation API (Datastreams' DSUI): events, intervals, counters, histograms and
sample groups, each named by (group, name) and switched on per stream by the experiment
file's enable patterns.

An entity's methods are rebound when logging starts or stops: a disabled entity's `log`
is a function that does nothing, and an enabled one's is a closure that appends its record
to its stream's buffer: a Struct of schema.py, or for events and intervals, the hot path, a
tuple in the order of schema.EventRecord and IntervalRecord (tests/datastream/test_schema.py
holds them to it). No flag is tested on the hot path. schema.py (msgspec) is loaded as an
entity is first enabled, not as it is declared: a program declares its entities at import,
before its phases are registered (bench/nodestart.py).

    SENT = nodelib.event("STIM", "send", "a request left the client")
    RTT = nodelib.interval("STIM", "rtt")
    SENT.log(seq)                 # an event, tag seq
    RTT.start(); ...; RTT.end(seq)
    PUT = nodelib.operation("KV", "put")
    t = PUT.start(); ...; PUT.ok(t)   # or PUT.failed(t, "refused"), timed_out, unknown
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

TYPE_CHECKING = False  # typing's own flag, without importing typing: a program's start (nodelib's imports)
if TYPE_CHECKING:
    from typing import Any

    from .loghist import LogScale
    from .schema import NamespaceRecord
    from .writer import Stream

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

    def namespace_record(self) -> NamespaceRecord:
        from .schema import NamespaceRecord

        return NamespaceRecord(_clock(), self.id, self.kind, self.group, self.name, self.desc, self.decoder,
                               self.spec)

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


def _off_start(clock: Callable[[], int] = _clock) -> int:
    """A disabled operation's `start`: the time still, which its end counts from."""
    return clock()


def _off_end(start_ns: int, cause: str | None = None, intended_ns: int | None = None,
             clock: Callable[[], int] = _clock) -> int:
    """A disabled operation's end: nothing logged, its latency still returned."""
    return clock() - (start_ns if intended_ns is None or intended_ns > start_ns else intended_ns)


class Operation(Entity):
    """A request to a system under test with its outcome: `t = start()`, then one of
    `ok(t)`, `failed(t, cause)`, `timed_out(t, cause)` or `unknown(t, cause)` (sent, no
    answer) logs it at its end, as one record (schema.OperationRecord). Each returns the
    operation's latency in ns, counted from `intended_ns` (a pacer's instant) where one is
    given and earlier than `t`, else from `t`; how much later than intended it started is
    the record's lag. Every outcome is the same closure over a different code, so a failure
    costs what a success does; a cause is a short text (a few words, not a traceback)."""

    __slots__ = ("failed", "ok", "start", "timed_out", "unknown")
    kind = "operation"

    def _bind(self) -> None:
        if not self.targets:
            self.start = _off_start
            self.ok = self.failed = self.timed_out = self.unknown = _off_end
            return
        eid, stream = self.id, self._single()
        if stream is not None:  # the hot path, inlined as an interval's is
            buf, limit, flush = stream.buf, stream.limit, stream.flush
            append = buf.append

            def outcome(code: int) -> Callable[..., int]:
                def end(start_ns: int, cause: str | None = None, intended_ns: int | None = None,
                        clock: Callable[[], int] = _clock) -> int:
                    now = clock()
                    origin = start_ns if intended_ns is None or intended_ns > start_ns else intended_ns
                    append((eid, now, code, origin, start_ns - origin) if cause is None
                           else (eid, now, code, origin, start_ns - origin, cause))
                    if len(buf) >= limit:
                        flush()
                    return now - origin
                return end
        else:
            put = self._put()

            def outcome(code: int) -> Callable[..., int]:
                def end(start_ns: int, cause: str | None = None, intended_ns: int | None = None,
                        clock: Callable[[], int] = _clock) -> int:
                    now = clock()
                    origin = start_ns if intended_ns is None or intended_ns > start_ns else intended_ns
                    put((eid, now, code, origin, start_ns - origin) if cause is None
                        else (eid, now, code, origin, start_ns - origin, cause))
                    return now - origin
                return end

        from .schema import OUTCOMES  # bound once streams start: msgspec is loaded by then

        self.start = _off_start
        self.ok, self.failed, self.timed_out, self.unknown = (outcome(OUTCOMES.index(o)) for o in OUTCOMES)


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
        from .schema import CounterRecord

        eid, put = self.id, self._put()

        def add(n: int | float = 1) -> None:
            total[0] += n

        def reset() -> None:
            total[0] = 0
        self.add, self.reset = add, reset
        self.log = lambda: put(CounterRecord(eid, _clock(), total[0]))


class Histogram(Entity):
    """Frequencies of a value over `buckets` bins of [lo, hi), with one bin below and one
    above: equal bins, or with spec `scale: log` bins growing by a constant factor
    (datastream/loghist.py: bounded relative error, merged exactly across hosts and runs).
    `add(v)`, `log()` writes (counts, sum), `reset()`; `flush()` logs and resets, so that
    each record holds the values since the last: what a merge of records adds up."""

    __slots__ = ("_counts", "add", "flush", "log", "reset")
    kind = "histogram"

    def _bind(self) -> None:
        lo, hi, n = self.spec["lo"], self.spec["hi"], self.spec["buckets"]
        self._counts = counts = [0] * (n + 2)
        total = [0]
        if not self.targets:
            self.add = self.log = self.reset = self.flush = _off
            return
        from .loghist import LOG  # bound once streams start: msgspec is loaded by then
        from .schema import HistogramRecord

        log_scale = self.spec.get("scale") == LOG
        # A log bin is found from log(v): [log lo, log hi) in n equal parts.
        base, scale = (math.log(lo), n / math.log(hi / lo)) if log_scale else (lo, n / (hi - lo))

        eid, put = self.id, self._put()
        log = math.log

        def add(v: int | float) -> None:
            if v < lo:
                counts[0] += 1
            elif v >= hi:
                counts[-1] += 1
            else:
                # min(): rounding can carry a value just under hi into bin n.
                counts[1 + min(int(((log(v) if log_scale else v) - base) * scale), n - 1)] += 1
            total[0] += v

        def reset() -> None:
            counts[:] = [0] * (n + 2)
            total[0] = 0

        def write() -> None:
            put(HistogramRecord(eid, _clock(), counts[:], total[0]))

        def flush() -> None:
            write()
            reset()
        self.add, self.reset, self.log, self.flush = add, reset, write, flush

    @property
    def scale(self) -> LogScale | None:
        """The log bins (None for equal bins)."""
        from .loghist import LOG, LogScale

        return LogScale.of(self.spec) if self.spec.get("scale") == LOG else None

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
        from .schema import SamplesRecord

        eid, put = self.id, self._put()

        def log(values: Sequence[Any], ts: int | None = None) -> None:
            put(SamplesRecord(eid, _clock() if ts is None else ts, values))
        self.log = log
