"""The process's open streams, and what they share: the flusher thread they own (started by
the first to open, stopped and joined by the last to close), flushing and closing them at
exit and on SIGTERM, and reopening them in a forked child (each Stream is writer.py's).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
import weakref
from typing import Any, Protocol

from .format import DEFAULT_FLUSH_MS


class _Config(Protocol):
    flush_ms: int


class Stream(Protocol):
    """What this module asks of an open stream (writer.py's `Stream`, which imports this
    module: so it is named by what it does, not imported)."""

    config: _Config
    lock: threading.Lock
    buf: list[Any]
    flushed_ns: int

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def _reopen_in_child(self) -> None: ...

# How long the last stream's close waits for the flusher to end: at most one flush of a
# chunk it had begun.
STOP_S = 5.0

# Every open stream of this process, for the flusher, exit, SIGTERM and fork.
live_streams: weakref.WeakSet[Stream] = weakref.WeakSet()
_in_flush = threading.local()
_term_pending = False


class flushing:
    """Hold a stream's lock; a SIGTERM arriving meanwhile in this thread is acted on
    after the lock is released, so the handler never sees a half-taken buffer."""

    def __init__(self, stream: Stream):
        self.stream = stream

    def __enter__(self) -> None:
        self.stream.lock.acquire()
        _in_flush.depth = getattr(_in_flush, "depth", 0) + 1

    def __exit__(self, *exc: object) -> None:
        _in_flush.depth -= 1
        self.stream.lock.release()
        if _term_pending and _in_flush.depth == 0 and \
                threading.current_thread() is threading.main_thread():
            _terminate()


class Flusher:
    """The one thread per process that writes chunks waiting longer than `flush_ms`.

    Owned by the open streams: the first to open starts it, and the last to close (or
    `close_all`) stops it and joins it within STOP_S, so a process with no stream open
    has no flusher. A thread whose streams were all dropped unclosed ends by itself."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.wake = threading.Event()  # set on a stop, and on a stream opened mid-tick

    def ensure_running(self) -> None:
        with self.lock:
            if self.thread is not None:
                self.wake.set()  # the new stream may want a shorter tick than the one slept
                return
            self.stopping, self.wake = threading.Event(), threading.Event()
            self.thread = threading.Thread(target=self._loop, args=(self.stopping, self.wake),
                                           name="netspec-flusher", daemon=True)
            self.thread.start()

    def stop_if_idle(self) -> None:
        """Stop and join the thread if no stream is open. Call with no stream's lock held:
        the thread may be waiting for one to flush it."""
        with self.lock:
            if live_streams or self.thread is None:
                return
            thread, self.thread = self.thread, None
            self.stopping.set()
            self.wake.set()
        if thread is not threading.current_thread():
            thread.join(STOP_S)
            if thread.is_alive():
                print(f"netspec: the stream flusher did not end within {STOP_S:g} s (a write blocked?)",
                      file=sys.stderr)

    def _loop(self, stopping: threading.Event, wake: threading.Event) -> None:
        while True:
            streams = list(live_streams)
            tick = min((s.config.flush_ms for s in streams), default=DEFAULT_FLUSH_MS) / 1000
            wake.wait(tick)
            wake.clear()  # a stream opened after this is in the next turn's tick
            if stopping.is_set():
                return
            now = time.monotonic_ns()
            for stream in list(live_streams):
                # Each stream waits its own flush_ms (minus half a tick, so a tick never
                # just misses it), whatever the tick other streams set.
                due = stream.flushed_ns + (stream.config.flush_ms - tick * 500) * 1_000_000
                if stream.buf and now >= due:
                    stream.flush()
            with self.lock:
                if not live_streams and self.thread is threading.current_thread():
                    self.thread = None  # its streams were dropped without a close
                    return

    def forget(self) -> None:
        """After fork: the parent's thread is not the child's."""
        self.lock = threading.Lock()
        self.thread = None


flusher = Flusher()


def close_all() -> None:
    """Flush and close every stream of this process (at exit, on SIGTERM); the flusher
    ends with the last."""
    for stream in list(live_streams):
        stream.close()
    flusher.stop_if_idle()


def _terminate() -> None:
    global _term_pending
    _term_pending = False
    close_all()
    previous = _previous_sigterm
    if callable(previous):
        previous(signal.SIGTERM, None)
        return
    # Die of SIGTERM as the process would have without us: its exit status says so.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _on_sigterm(signum: int, frame: object) -> None:
    global _term_pending
    if getattr(_in_flush, "depth", 0):
        _term_pending = True
        return
    _terminate()


_previous_sigterm: Any = None
_hooks_installed = False


def install_exit_hooks() -> None:
    """Flush at exit and on SIGTERM; reopen after fork. Called once, by the first stream.
    SIGTERM is taken only in the main thread, and an application's own handler is chained."""
    global _previous_sigterm, _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    atexit.register(close_all)
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                        after_in_child=_after_fork_child)
    if threading.current_thread() is threading.main_thread():
        _previous_sigterm = signal.getsignal(signal.SIGTERM)
        if _previous_sigterm is not signal.SIG_IGN:
            signal.signal(signal.SIGTERM, _on_sigterm)


def _before_fork() -> None:
    # No stream may be mid-flush in another thread when the child is cut off from it.
    for stream in list(live_streams):
        stream.lock.acquire()


def _after_fork_parent() -> None:
    for stream in list(live_streams):
        stream.lock.release()


def _after_fork_child() -> None:
    flusher.forget()
    for stream in list(live_streams):
        stream._reopen_in_child()
    if live_streams:
        flusher.ensure_running()
