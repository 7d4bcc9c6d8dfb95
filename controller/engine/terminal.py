"""What ns_control and the Python API (netspec.experiment) print, and where: progress and results on
stdout, errors on stderr. Below the command line, so that the API does not depend on it."""

from __future__ import annotations

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

    def out(self, text: str, end: bool = True) -> None:
        print(text, end="\n" if end else "", flush=True, file=self.stdout or sys.stdout)
        self.line_open = not end and (bool(text) or self.line_open)

    def err(self, lines: list[str]) -> None:
        print_lines(lines, sys.stderr)

    def count(self, what: str, done: int, total: int) -> None:
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


def print_lines(lines: list[str], stream: IO[str] | None = None) -> None:
    if lines:
        print("\n".join(lines), file=stream or sys.stdout, flush=True)

