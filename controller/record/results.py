"""What a component's run ended in, as the phase engine saw it (Invoke's `Result`)."""

from __future__ import annotations

import shlex
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from netspec.protocol.exits import UNASKED, describe_returncode, ended_well

TAIL_LINES = 200
LINE_LIMIT = 4096  # of a line still being written, the tail keeps its last characters


@dataclass
class ComponentResult:
    """One component's command, exit, duration, files and the tail of its output."""

    host: str
    component: str
    argv: list[str]
    exit_status: int | None = None
    duration_s: float | None = None
    forced: bool = False  # its daemon killed it: it did not end when asked
    ending: str = UNASKED  # how its end came about, as its Exit event tells (protocol/exits.py)
    files: list[Path] = field(default_factory=list)
    # Each stream's last lines apart (stdout, stderr): a noisy stderr cannot push out the
    # line of stdout that said why.
    _lines: dict[str, deque[str]] = field(default_factory=dict)
    _partial: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Still running, or ended cleanly: by the rule its daemon's Exit event applied."""
        return ended_well(self.exit_status, self.ending)

    def add_output(self, stream: str, data: bytes) -> None:
        text = self._partial.pop(stream, "") + data.decode(errors="replace")
        *lines, rest = text.split("\n")
        self._lines.setdefault(stream, deque(maxlen=TAIL_LINES)).extend(lines)
        if rest:
            self._partial[stream] = rest[-LINE_LIMIT:]

    def tail(self, n: int = 10) -> dict[str, list[str]]:
        """The last `n` lines of each stream that said anything, stdout first, a line still
        being written last."""
        tails = {}
        for stream in sorted({*self._lines, *self._partial}, key=lambda s: (s != "stdout", s)):
            partial = [self._partial[stream]] if stream in self._partial else []
            tails[stream] = [*self._lines.get(stream, ()), *partial][-n:]
        return tails

    def command_line(self) -> str:
        return shlex.join(self.argv)

    def describe_exit(self) -> str:
        text = describe_returncode(self.exit_status)
        if self.exit_status is not None and self.exit_status >= 0 and self.duration_s:
            text += f" after {self.duration_s:.1f} s"
        return text
