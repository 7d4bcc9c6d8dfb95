"""What a run leaves on this host when its daemon dies hard (SIGKILL, the OOM killer: no
reset runs), and its removal by the next daemon started here.

While a run is set up, a record of it is on disk: `<root>/.runs/<run id>.json` names the
run, its host and the daemon that holds it (its pid and start time: a pid reused since is
not taken for it). The run's reset removes it. A daemon at its start reads every record
whose daemon is gone and ends what that run left (`end_left`): its processes, found by the
run's id in their environment (one a pause fault left stopped is resumed, so that the
SIGTERM its daemon's death sent it takes effect and nodelib flushes its streams; SIGKILL
after a grace), and its link conditions, found by the run's names (links/sweep.py). What
it removed is said in its log and kept beside the record (`<run id>.swept.json`, `swept`).
`netspecd --kill-run` ends a run's leftovers alike (`end_left`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import msgspec
import psutil
from netspec.links import sweep
from netspec.protocol import messages as m
from netspec.protocol.errors import NetspecError
from netspec.protocol.exits import run_processes, signal_pids
from netspec.protocol.names import safe_name

RECORDS = ".runs"
SWEPT = ".swept.json"


class Held(msgspec.Struct, forbid_unknown_fields=True):
    """A run set up on this host, and the daemon that holds it."""

    run: str
    host: str
    pid: int
    started: float  # the daemon's start, psutil's create_time: its pid may be reused


class Swept(msgspec.Struct, forbid_unknown_fields=True):
    """What a daemon at its start removed of a run whose daemon had died."""

    run: str
    host: str
    pid: int  # the daemon that died
    at_ns: int
    removed: list[str]


def _records(root: Path) -> Path:
    return root / RECORDS


def hold(root: Path, run_id: str, host: str) -> Path:
    """Record that this daemon holds run `run_id` (a name: checked by the Supervisor);
    the record's path, for `release`. Written whole or not at all."""
    records = _records(root)
    records.mkdir(parents=True, exist_ok=True)
    me = psutil.Process()
    path = records / f"{run_id}.json"
    partial = path.with_name(path.name + ".part")
    partial.write_bytes(msgspec.json.encode(Held(run_id, host, me.pid, me.create_time())))
    partial.replace(path)
    return path


def release(path: Path | None) -> None:
    """The run is reset: nothing of it is left to end."""
    if path is not None:
        path.unlink(missing_ok=True)


def _holder_alive(held: Held) -> bool:
    try:
        return psutil.Process(held.pid).create_time() == held.started
    except psutil.Error:
        return False


def end_left(run_id: str, host: str, grace_s: float) -> list[str]:
    """End what run `run_id` (on `host`, if given) left here: its processes (a stopped one
    resumed first), then its link conditions. Blocking; what was done, each for people."""
    victims = run_processes(run_id, [], host)
    said = []
    stopped = []
    for proc in victims:
        with contextlib.suppress(psutil.Error):
            if proc.status() == psutil.STATUS_STOPPED:
                stopped.append(proc)
                name = proc.environ().get(m.COMPONENT_ENV, proc.name())
                said.append(f"process {proc.pid} ({name}), left stopped by a pause: resumed and ended")
    signal_pids([p.pid for p in victims], signal.SIGTERM)
    signal_pids([p.pid for p in stopped], signal.SIGCONT)  # its SIGTERM waits for it
    _, alive = psutil.wait_procs(victims, timeout=grace_s)
    signal_pids([p.pid for p in alive], signal.SIGKILL)
    if victims:
        killed = f", {len(alive)} of them SIGKILLed after {grace_s:g} s" if alive else ""
        said.append(f"{len(victims)} process(es) of the run ended{killed}")
    said += [f"removed the run's {removed}" for removed in sweep(run_id)]
    return said


def sweep_dead(root: Path, grace_s: float) -> list[str]:
    """At a daemon's start: end what each run whose daemon died left here. One line said
    per run (and per record it could not read, which is removed all the same)."""
    records = _records(root)
    if not records.is_dir():
        return []
    said = []
    for path in sorted(records.glob("*.json")):
        if path.name.endswith(SWEPT):
            continue
        try:
            held = msgspec.json.decode(path.read_bytes(), type=Held)
            safe_name(held.run, "run id")
            if held.host:
                safe_name(held.host, "host")
        except (OSError, msgspec.ValidationError, msgspec.DecodeError, NetspecError) as exc:
            said.append(f"{path}: not a record of a run ({exc}): removed, nothing of it ended")
            path.unlink(missing_ok=True)
            continue
        if _holder_alive(held):
            continue  # a live daemon's, beside this one on the same root
        removed = end_left(held.run, held.host, grace_s)
        swept = Swept(held.run, held.host, held.pid, time.time_ns(), removed)
        (records / f"{held.run}{SWEPT}").write_bytes(msgspec.json.encode(swept))
        path.unlink(missing_ok=True)
        said.append(f"run {held.run} (host {held.host or '-'}): its netspecd (pid {held.pid}) died "
                    f"without ending it: {'; '.join(removed) or 'nothing of it was left'}")
    return said


def swept(root: Path, run_id: str) -> Swept | None:
    """What a daemon's start removed of run `run_id` here, if it removed anything; the note
    is removed once read (collect asks once)."""
    path = _records(root) / f"{safe_name(run_id, 'run id')}{SWEPT}"
    try:
        note = msgspec.json.decode(path.read_bytes(), type=Swept)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise NetspecError(f"{path}: unreadable ({exc})") from exc
    with contextlib.suppress(OSError):
        os.unlink(path)
    return note
