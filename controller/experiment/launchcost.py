"""What a launch asks of the machine it runs on (issue 55): the components this machine
starts at launch and the CPU they take to register, which the launch deadline a file gets
when it gives none covers (load.py's `default_deadline_s`), and the refusal of one it gives
that no machine of these cores could meet.

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
# command's), the daemon's spawn included: a NETSPEC-aware program 47 ms of its own at its
# registration on the 2-core VM (bench/nodestart.py, issue 55), the daemon's fork, pipes and
# welcome a few more; a plain command the daemon's fork and exec.
PROGRAM_START_CPU_S = 0.06
COMMAND_START_CPU_S = 0.005
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

    def describe(self) -> str:
        what = [f"{n} {kind}{'s' if n != 1 else ''}" for n, kind in
                ((self.programs, "NETSPEC-aware program"), (self.commands, "command")) if n]
        return (f"this machine starts {' and '.join(what) or 'nothing'} at launch, at least "
                f"{self.floor_s:.1f} s of its {self.cores} core{'s' if self.cores != 1 else ''} "
                f"({PROGRAM_START_CPU_S * 1e3:.0f} ms of CPU a program, {COMMAND_START_CPU_S * 1e3:.0f} ms "
                f"a command)")


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


def refusal(launch: Launch, deadline_s: float, default_s: float) -> str | None:
    """Why a launch of `deadline_s` cannot succeed here (`default_s`: the deadline it would
    get by default), or None."""
    if deadline_s >= launch.floor_s:
        return None
    return (f"a deadline of {deadline_s:g} s cannot be met: {launch.describe()}; leave it out "
            f"(the default grows with the fleet: {default_s:.0f} s here) or give more")
