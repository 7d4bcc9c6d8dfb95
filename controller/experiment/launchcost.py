"""What a launch asks of the machine it runs on (issue 55): the components this machine
starts at launch and the CPU they take to register, and to open their streams at their first
start_logging (the stream writer and its codecs load then); the deadlines of launch and
start_logging that a file gets when it gives none cover it (load.py's `default_deadline_s`),
and one it gives that no machine of these cores could meet is refused.

This machine is the controller's: its local hosts, and the containers of its own Docker
engine, start their programs on its cores (`os.cpu_count()`). A host at an address, over
SSH or in a remote engine runs on a machine whose cores are known only at its hello, and is
left out of the sum.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .model import LOCAL_ENGINE, Component, Host, engine_url

# The CPU a component's start takes up to its registration (a program's) or its exec (a
# command's), the daemon's spawn included: a NETSPEC-aware program 45 ms of its own at its
# registration on the 2-core VM (bench/nodestart.py, issue 55), the daemon's fork, pipes and
# welcome a few more; a plain command the daemon's fork and exec.
PROGRAM_START_CPU_S = 0.06
COMMAND_START_CPU_S = 0.005
# A program's first start_logging: the writer, msgspec and the record schema load (44 ms of
# CPU beyond its registration to its first event, bench/nodestart.py), and its daemon opens
# its own streams beside it.
LOGGING_START_CPU_S = 0.06
# The default launch's deadline is this many times the floor at least: the daemons' own start
# and the controller's share the cores, and a machine shared with other work is slower.
MARGIN = 3.0
SAID_FROM_S = 1.0  # `check` says what the launch asks of this machine from this floor on


@dataclass(frozen=True)
class Launch:
    """What this machine starts at launch, and the least time its cores take to."""

    programs: int
    commands: int
    cores: int

    @property
    def floor_s(self) -> float:
        """The CPU the starts take, spread perfectly over every core: no launch is quicker."""
        return (self.programs * PROGRAM_START_CPU_S + self.commands * COMMAND_START_CPU_S) / self.cores

    @property
    def logging_floor_s(self) -> float:
        """The same for the programs' first start_logging."""
        return self.programs * LOGGING_START_CPU_S / self.cores

    def floor_of(self, phase: str) -> float:
        """The least time `phase` takes on this machine's cores (0: nothing to start)."""
        return {"launch": self.floor_s, "start_logging": self.logging_floor_s}.get(phase, 0.0)

    def describe(self, phase: str = "launch") -> str:
        cores = f"{self.cores} core{'s' if self.cores != 1 else ''}"
        if phase == "start_logging":
            each = f"{LOGGING_START_CPU_S * 1e3:.0f} ms of CPU a program"
            programs = f"{self.programs} NETSPEC-aware program{'s' if self.programs != 1 else ''}"
            return (f"this machine's {programs} "
                    f"load their stream writer at their first start_logging, at least "
                    f"{self.logging_floor_s:.1f} s of its {cores} ({each})")
        what = [f"{n} {kind}{'s' if n != 1 else ''}" for n, kind in
                ((self.programs, "NETSPEC-aware program"), (self.commands, "command")) if n]
        return (f"this machine starts {' and '.join(what) or 'nothing'} at launch, at least "
                f"{self.floor_s:.1f} s of its {cores} ({PROGRAM_START_CPU_S * 1e3:.0f} ms of CPU a program, "
                f"{COMMAND_START_CPU_S * 1e3:.0f} ms a command)")


def on_this_machine(host: Host) -> bool:
    return host.local or (host.docker is not None and host.docker.container is None
                          and engine_url(host.docker.engine) == LOCAL_ENGINE)


def launch_here(components: Iterable[Component], hosts: Mapping[str, Host],
                cores: int | None = None) -> Launch:
    """What this machine starts at launch: its hosts' programs, and their commands whose
    start phase is launch."""
    here = [c for c in components if c.host in hosts and on_this_machine(hosts[c.host])]
    return Launch(sum(c.aware for c in here), sum(not c.aware and c.start == "launch" for c in here),
                  cores or os.cpu_count() or 1)


def refusal(phase: str, launch: Launch, deadline_s: float, default_s: float) -> str | None:
    """Why `phase` with a deadline of `deadline_s` cannot succeed here (`default_s`: the
    deadline it would get by default), or None."""
    if deadline_s >= launch.floor_of(phase):
        return None
    return (f"a deadline of {deadline_s:g} s cannot be met: {launch.describe(phase)}; leave it out "
            f"(the default grows with the fleet: {default_s:.0f} s here) or give more")
