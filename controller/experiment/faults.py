"""The file's `faults:`: a schedule of faults, each at an instant relative to a phase's start
or to the run's, checked with every error at once (file:line:key).

    faults:
      - {kill: server, at: {phase: run, after: 2s}}      # SIGKILL to the component's group
      - {terminate: worker, at: {phase: run, after: 1s}} # SIGTERM
      - {restart: worker, at: {phase: run, after: 2s}}   # SIGKILL, then started again
      - {kill: server, at: {phase: run, after: 2s}}
      - {start: server, at: {phase: run, after: 4s}}     # started again, once ended
      - {pause: client, at: {phase: run, after: 1s}, for: 500ms}  # SIGSTOP, SIGCONT after `for`
      - {resume: client, at: {phase: run, after: 3s}}    # SIGCONT
      - {cpu: h1, at: {after: 5s}, for: 2s, workers: 2}  # busy processes on the host
      - {memory: h1, at: {phase: run, after: 0s}, for: 1s, size: 64MB}  # resident, touched
      - {disk: h1, at: {phase: run, after: 0s}, for: 1s, size: 16MB}    # written, synced, removed
      - {partition: [h1, h2], at: {phase: run, after: 1s}, for: 2s}  # no packet between them
      - {heal: [h1, h2], at: {phase: run, after: 5s}}    # the links: conditions back
      - {partition: {isolate: h1}, at: {after: 6s}}     # h1 from every other host
      - {partition: [[h1, h2], [h3, h4, h5]], at: {after: 7s}}  # a split into sides
      - {kill_daemon: h2, at: {phase: run, after: 3s}}  # SIGKILL to the host's netspecd
      - {kill: {role: leader}, at: {phase: run, after: 8s}}  # whichever component holds it then
      - {partition: {isolate: {role: leader}}, at: {after: 9s}, for: 2s}  # its holder's host

`at: {phase: P, after: D}` is D after the start of the first step of phase P on its host
(the step's release: its instant with `release: at`, else when the controller sends it);
`at: {after: D}` is D after the run's first step. A component fault happens on its
component's host, in a phase its component runs in (from its `start` to its `stop`); a pressure
names its host. A pressure is bounded in size and time
(MAX_PRESSURE_BYTES, MAX_FOR_S; its workers at most 64, as the schema says) and lives in the
run's own files, removed after.
A component fault, or a partition or heal isolating one host, may be aimed at a role
(`{role: NAME}`) that programs claim (nodelib.claim): its target is chosen at its instant
(controller/engine/faults.py); a heal or resume of a role undoes what the last partition or
pause of it chose. A partition or heal names two hosts or groups, sides of a split (lists of
them), or one to isolate from the rest: one fault, done per direction between hosts of
different sides, each direction by the host it leaves (netspec.links' conditions: a
partition is put on top of the direction's `links:` condition, for `for` if given; its end
or a heal lifts it alone, leaving the condition as `links:` holds it then). Local
daemons share this machine's network stack: refused in a partition, as in `links:`. A
host whose daemon the schedule killed leaves the run: its components are out of the steps
after, its daemon's node part too, and its files are salvaged at collect.
"""

from __future__ import annotations

import re
from typing import Any

from netspec.protocol.kinds import COMPONENT_FAULTS, FAULT_KINDS, LINK_FAULTS, PRESSURE_FAULTS
from netspec.protocol.messages import is_role
from netspec.protocol.runplan import PlanFault

from .durations import parse_duration
from .links import _names as link_hosts
from .model import Component, Host, Step
from .sourcefile import Path_, SourceFile

MAX_PRESSURE_BYTES = 1 << 30  # a memory or disk pressure's size at most: 1 GiB
MAX_FOR_S = 3600.0  # a pause's or pressure's length at most
_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9,
               "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30}


def parse_size(value: int | str) -> int:
    """A size in bytes: an integer, or a number with a unit (kB, MB, GB, KiB, MiB, GiB).

    Raises:
        ValueError: not a size.
    """
    if isinstance(value, int):
        return value
    found = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", value)
    if found is None or found.group(2).upper() not in _SIZE_UNITS:
        raise ValueError(f"'{value}' is not a size (bytes, or a number with kB, MB, GB, KiB, MiB, GiB)")
    return round(float(found.group(1)) * _SIZE_UNITS[found.group(2).upper()])


def faults_of(src: SourceFile, raw: list[Any], hosts: dict[str, Host], groups: dict[str, tuple[str, ...]],
              components: tuple[Component, ...], schedule: tuple[Step, ...],
              fan_out: int | None) -> tuple[PlanFault, ...]:
    """Every fault of the file's `faults:`, one per entry, each checked; every error
    recorded in `src` (the caller raises them all at once)."""
    faults = []
    names = {c.name: c for c in components}
    phases = [s.phase for s in schedule]
    for i, spec in enumerate(raw):
        where: Path_ = ("faults", i)
        with src.checking():
            faults.append(_fault(src, spec, where, hosts, groups, names, phases))
        if fan_out is not None:
            with src.checking():
                src.error(f"faults are sent to each host's daemon directly, which a fan-out tree "
                          f"(fan_out: at line {src.line(('fan_out',))}) does not reach: drop one", where)
    _check_starts(src, faults, phases)
    return tuple(faults)


def _check_starts(src: SourceFile, faults: list[PlanFault], phases: list[str]) -> None:
    """A `start` needs its component ended first by the schedule: a kill or terminate of it at
    an earlier instant (one relative to the run's start and one to a phase's cannot be
    ordered from the file: taken as earlier). Else it would find its component running."""
    def before(end: PlanFault, start: PlanFault) -> bool:
        if (end.phase is None) != (start.phase is None):
            return True
        if end.phase is None or start.phase is None:
            return end.after_s < start.after_s
        return (phases.index(end.phase), end.after_s) < (phases.index(start.phase), start.after_s)
    for i, start in enumerate(faults):
        if start.kind != "start":
            continue
        ends = [end for end in faults if end.kind in ("kill", "terminate") and end.target == start.target]
        if not any(before(end, start) for end in ends):
            with src.checking():
                src.error(f"a start of '{start.target}' needs it ended first: no kill or terminate of "
                          f"'{start.target}' comes before it (a restart kills and starts it in one)",
                          ("faults", i, "start"))


def _role(src: SourceFile, kind: str, target: Any, where: Path_) -> str | None:
    """The role a fault is aimed at (`{role: NAME}`), None if it names its target."""
    if not isinstance(target, dict) or "role" not in target:
        return None
    if set(target) != {"role"} or not is_role(target["role"]):
        src.error(f"a role is given as {{role: NAME}} (letters, digits, '_', '-', '.'; at most 64); "
                  f"this gives {target}", where)
    if kind == "start":
        src.error("a start is of an ended component, which holds no role: name the component", where)
    return str(target["role"])


def _fault(src: SourceFile, spec: dict[str, Any], where: Path_, hosts: dict[str, Host],
           groups: dict[str, tuple[str, ...]], components: dict[str, Component],
           phases: list[str]) -> PlanFault:
    kinds = [k for k in FAULT_KINDS if k in spec]
    if not kinds and src.pruned_within(where):
        raise KeyError("its kind's value, refused by the schema")  # said there: nothing more to check
    if len(kinds) != 1:
        src.error(f"give exactly one kind of fault ({', '.join(FAULT_KINDS)}); "
                  f"this gives {', '.join(kinds) or 'none'}", where)
    kind = kinds[0]
    target = spec[kind]
    sides: tuple[tuple[str, ...], ...] = ()
    role = None
    if kind in COMPONENT_FAULTS:
        role = _role(src, kind, target, (*where, kind))
        if role is None:
            src.known("component", target, components, (*where, kind))
            host = components[target].host
        else:
            target = host = ""
    elif kind in LINK_FAULTS:
        isolated = target.get("isolate") if isinstance(target, dict) else None
        role = _role(src, kind, isolated, (*where, kind, "isolate"))
        if role is not None:  # its holder's host against every other: all of them a side
            sides = (tuple(link_hosts(src, list(hosts), (*where, kind), hosts, groups)),)
            target = host = ""
        else:
            sides = tuple(tuple(side) for side in _sides(src, kind, target, (*where, kind), hosts, groups))
            if not PlanFault(kind, "", "", sides=sides).directions():
                src.error(f"a {kind} is between two hosts: these name one", (*where, kind))
            host, target = ", ".join(sides[0]), " | ".join(", ".join(side) for side in sides[1:])
    else:
        src.known("host", target, hosts, (*where, kind))
        host = target
    at = spec["at"]
    phase = at.get("phase")
    if phase is not None:
        with src.checking():
            src.known("phase", phase, phases, (*where, "at", "phase"))
        if phase == "collect":
            with src.checking():
                src.error("a fault at collect would hit the run's gathering: give an earlier phase",
                          (*where, "at", "phase"))
        if kind in COMPONENT_FAULTS and phase in phases and role is None:
            with src.checking():
                _check_alive(src, components[target], phase, phases, (*where, "at", "phase"))
    for_s = parse_duration(spec["for"]) if "for" in spec else None
    with src.checking():
        _check_length(src, kind, spec, for_s, where)
    size = None
    if kind in ("memory", "disk"):
        with src.checking():
            size = _size(src, kind, spec, where)
    elif "size" in spec:
        with src.checking():
            src.error(f"'size' is a memory or disk pressure's; a {kind} takes none", (*where, "size"))
    workers = spec.get("workers")
    if workers is not None and kind != "cpu":
        with src.checking():
            src.error(f"'workers' is a cpu pressure's; a {kind} takes none", (*where, "workers"))
    return PlanFault(kind, target, host, parse_duration(at.get("after", 0)), phase, for_s, size,
                     workers if workers is not None else (1 if kind == "cpu" else None), src.line(where),
                     sides, role)


def _sides(src: SourceFile, kind: str, target: Any, where: Path_, hosts: dict[str, Host],
           groups: dict[str, tuple[str, ...]]) -> list[list[str]]:
    """The hosts on each side of a partition or heal: `[a, b]` (hosts or groups), a split
    `[[a, b], [c, d], ...]` (no packet between hosts of different sides), or `{isolate: a}`
    (a against every other host of the file)."""
    if isinstance(target, dict):
        if set(target) != {"isolate"}:
            src.error(f"a {kind} of a mapping takes 'isolate: HOST' (or a group) alone; "
                      f"this gives {', '.join(map(str, target)) or 'nothing'}", where)
        alone = link_hosts(src, target["isolate"], (*where, "isolate"), hosts, groups)
        rest = [h for h in hosts if h not in alone]
        return [alone, link_hosts(src, rest, (*where, "isolate"), hosts, groups)]
    if not isinstance(target, list) or len(target) < 2:
        src.error(f"a {kind} takes two hosts or groups ([a, b]), sides to split ([[a, b], [c]]) or "
                  "{isolate: a}", where)
    return [link_hosts(src, name, (*where, j), hosts, groups) for j, name in enumerate(target)]


def _check_alive(src: SourceFile, component: Component, phase: str, phases: list[str], where: Path_) -> None:
    """A component fault in a phase where its component runs: not before the phase it starts
    in, nor after the one it is stopped in (the fault would find nothing to do)."""
    at = phases.index(phase)
    if at < phases.index(component.start):
        src.error(f"'{component.name}' starts at phase '{component.start}', after this fault's "
                  f"phase '{phase}': give '{component.start}' or a later one", where)
    if component.stop is not None and at > phases.index(component.stop):
        src.error(f"'{component.name}' is stopped at phase '{component.stop}', before this "
                  f"fault's phase '{phase}': give '{component.stop}' or an earlier one", where)


def _check_length(src: SourceFile, kind: str, spec: dict[str, Any], for_s: float | None,
                  where: Path_) -> None:
    if kind in PRESSURE_FAULTS and for_s is None:
        src.error(f"a {kind} pressure lasts a while: give 'for' (at most {MAX_FOR_S:g} s)", where)
    if "for" in spec and kind not in (*PRESSURE_FAULTS, "pause", "partition"):
        src.error(f"'for' is how long a pause, a partition or a pressure lasts; a {kind} takes none",
                  (*where, "for"))
    if for_s is not None and for_s > MAX_FOR_S:
        src.error(f"{for_s:g} s is longer than a fault may last ({MAX_FOR_S:g} s)", (*where, "for"))


def _size(src: SourceFile, kind: str, spec: dict[str, Any], where: Path_) -> int:
    if "size" not in spec:
        src.error(f"a {kind} pressure needs 'size' (bytes, or e.g. 64MB; at most 1 GiB)", where)
    try:
        size = parse_size(spec["size"])
    except ValueError as exc:
        src.error(str(exc), (*where, "size"))
    if not 0 < size <= MAX_PRESSURE_BYTES:
        src.error(f"{size} bytes: a pressure's size is more than 0 and at most {MAX_PRESSURE_BYTES} "
                  "(1 GiB)", (*where, "size"))
    return size
