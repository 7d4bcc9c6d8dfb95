"""Whether a component asked to stop is at work on its end or sits idle, from what
/proc/PID/stat says of its processes at two looks (daemon/component.py `stop` waits for
the one and kills the other after a grace)."""

from __future__ import annotations

import os

from netspec.camp.procfs import stat_fields

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")  # /proc's unit of CPU time, per second


def activity(pids: list[int]) -> dict[int, tuple[bytes, int]]:
    """Each live process's state letter and CPU time (user + system, its threads' too, in
    clock ticks) from /proc/PID/stat; a process gone is left out."""
    seen = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = stat_fields(f.read())
            seen[pid] = (fields[0], int(fields[11]) + int(fields[12]))
        except (OSError, IndexError, ValueError):
            continue
    return seen


def ending(pid: int, before: dict[int, tuple[bytes, int]], now: dict[int, tuple[bytes, int]],
           seconds: float) -> bool:
    """Whether component process `pid` and its descendants, seen `before` and `now`
    (`activity`) `seconds` apart, are at work on their end: `pid` has exited (unreaped, or
    gone), or they used a twentieth of a CPU between the looks, or one was runnable (or in
    disk I/O) at both looks. A process that wakes now and then (a loop that sleeps, a
    shell's `sleep` each turn) is seen runnable at one look now and then, not at two."""
    if now.get(pid, (b"X",))[0] in b"ZX":
        return True
    used = sum(cpu - before[p][1] for p, (_, cpu) in now.items() if p in before)
    return used >= seconds * CLOCK_TICKS / 20 or all(
        any(state in b"RD" for state, _ in looked.values()) for looked in (before, now))
