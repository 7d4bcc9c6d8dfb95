"""Datastreams: a process's entities (entities.py) and the streams they log to, each entity
switched on per stream by the experiment file's enable patterns. Applications reach the
process's own instance through nodelib; netspecd keeps one per run for its node services.

The writer (msgspec, the record schema) is loaded as the first streams open, not with this
module: a program declares its entities and registers its phases without it
(bench/nodestart.py)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import Path

from netspec.protocol.errors import NetspecError

from .entities import Counter, Entity, Event, Histogram, Interval, Operation, SampleGroup
from .format import FIRST_ENTITY_ID

TYPE_CHECKING = False  # typing's own flag, without importing typing: a program's start (nodelib's imports)
if TYPE_CHECKING:
    from typing import Any

    from .writer import Stream, StreamConfig, StreamInfo


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

    def operation(self, group: str, name: str, desc: str = "") -> Operation:
        """Declare an operation: `t = start()`, then `ok(t)`, `failed(t, cause)`,
        `timed_out(t, cause)` or `unknown(t, cause)` logs it with its outcome."""
        return self._declare(Operation, group, name, desc, None, {})

    def counter(self, group: str, name: str, desc: str = "") -> Counter:
        """Declare a counter: `add(n)` logs its running total."""
        return self._declare(Counter, group, name, desc, None, {})

    def histogram(self, group: str, name: str, lo: float, hi: float, buckets: int = 0,
                  desc: str = "", relative_error: float | None = None) -> Histogram:
        """Declare a histogram over [lo, hi): `buckets` equal bins, or, given
        `relative_error`, log bins as many as keep every value within it (loghist.py);
        `add(value)` counts a value, `log()` or `flush()` (log, then reset) writes the bins."""
        if relative_error is not None:
            from .loghist import LOG, buckets_for  # msgspec's Structs: only for a log histogram

            try:
                buckets = buckets_for(lo, hi, relative_error)
            except ValueError as exc:
                raise NetspecError(f"histogram {group}/{name}: {exc}") from None
            return self._declare(Histogram, group, name, desc, None,
                                 {"lo": lo, "hi": hi, "buckets": buckets, "scale": LOG})
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
        from .process import install_exit_hooks
        from .writer import Stream

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
            if not self.paused:
                return  # a second start_logging: rebinding every entity again changes nothing
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
