"""What ns_control and the Python API (netspec.experiment) print, and where: progress and results on
stdout, errors on stderr. Below the command line, so that the API does not depend on it."""

from __future__ import annotations

import contextlib
import os
import re
import select
import sys
from typing import IO

import rich.console
import rich.progress

from .summary import LISTED_OK


class Terminal:
    """runner.Output for people: progress and results on stdout, errors on stderr. On a
    terminal, bringing up and gathering a fleet of more than a few hosts shows a bar."""

    def __init__(self, stdout: IO[str] | None = None, bars: bool | None = None):
        self.stdout = stdout
        self.bars = bars
        self.bar: rich.progress.Progress | None = None
        self.task = rich.progress.TaskID(0)
        self.line_open = False
        self.closed = False  # stdout's reader went away: nothing more is written to it
        self.err_closed = False  # so did stderr's (`2>&1 | head`): nothing more said on it

    def out(self, text: str, end: bool = True) -> None:
        if self.closed:
            return
        try:
            print(printable(text), end="\n" if end else "", flush=True, file=self.stdout or sys.stdout)
        except BrokenPipeError:
            self._reader_gone()
            return
        self.line_open = not end and (bool(text) or self.line_open)

    def lines(self, lines: list[str]) -> None:
        """Lines of a command that works on (`fetch`, `collect`), each as `out` prints it."""
        for line in lines:
            self.out(line)

    def err(self, lines: list[str]) -> None:
        """Errors on stderr; once its reader is gone (`2>&1 | head`, the same pipe as stdout),
        nothing more is said there, and stderr writes to /dev/null (nothing else said on it
        fails either): the run goes on to its end, as it does for stdout."""
        if self.err_closed:
            return
        try:
            print_lines(lines, sys.stderr)
        except BrokenPipeError:
            self.err_closed = True
            quiet_stdout(sys.stderr)

    def count(self, what: str, done: int, total: int) -> None:
        if self.closed:
            return
        try:
            self._count(what, done, total)
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        """stdout's reader went away (`ns_control run FILE | head`): a measurement never stops
        for it. Said once on stderr; stdout then writes to /dev/null, so that nothing printed
        later, nor Python's last flush, fails on it again; the run goes on to its end."""
        self.closed = True
        quiet_stdout(self.stdout or sys.stdout)
        bar, self.bar = self.bar, None
        if bar is not None:  # its refresh thread ended, its last frame to /dev/null now
            with contextlib.suppress(OSError, ValueError):
                bar.stop()
        self.err(["netspec: stdout was closed by its reader: nothing more printed on it; the command goes on "
                  "to its end"])

    def _count(self, what: str, done: int, total: int) -> None:
        stdout = self.stdout or sys.stdout
        if total <= LISTED_OK or not (stdout.isatty() if self.bars is None else self.bars):
            return
        if self.bar is None:
            if self.line_open:  # the bar takes lines of its own
                self.out("")
            self.bar = rich.progress.Progress(
                rich.progress.TextColumn("  {task.description:<14}"), rich.progress.BarColumn(),
                rich.progress.MofNCompleteColumn(), rich.progress.TimeElapsedColumn(),
                console=rich.console.Console(file=stdout, force_terminal=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(f"{what} hosts", total=total)
        self.bar.update(self.task, completed=done)
        if done >= total:
            self.bar.stop()
            self.bar = None


TERMINAL = Terminal()


def quiet_stdout(stream: IO[str]) -> None:
    """Point `stream`'s (stdout's or stderr's) file descriptor at /dev/null (its reader went
    away), what its buffer held dropped with it; a stream without one (a test's StringIO) is left as it is."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def reader_gone(stream: IO[str]) -> bool:
    """Whether `stream`'s reader went away: its pipe has no reader (poll says POLLERR), or
    its terminal hung up. A BrokenPipeError from elsewhere (a socket, a child's pipe) is
    then told from stdout's own."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):
        return False
    poll = select.poll()
    poll.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))


# C0 but tab and newline, DEL, and C1 (0x9b is a CSI of its own on some terminals).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with each control character but tab and newline written as its escape (ESC as
    \\x1b): what is printed comes from files (a run's record, a received bundle's, its
    streams), and an escape sequence in one would be a command to the terminal (OSC 52 sets
    the clipboard, OSC 0 the window's title, CSI moves the cursor over what was said)."""
    return _CONTROL.sub(lambda found: f"\\x{ord(found[0]):02x}", text)


def print_lines(lines: list[str], stream: IO[str] | None = None) -> None:
    """`lines` on `stream` (stdout), their control characters escaped (`printable`)."""
    if lines:
        print(printable("\n".join(lines)), file=stream or sys.stdout, flush=True)

