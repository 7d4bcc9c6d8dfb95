"""All components of one experiment on this host: enter their phases, reset the run.

Reset kills every process that carries the run's id in its environment, so even a
grandchild that left the process group and was re-parented is not left behind. One
component's process is daemon/component.py's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import stat
from pathlib import Path
from typing import Any

import psutil
from netspec.datastream.writer import StreamConfig
from netspec.protocol import messages as m
from netspec.protocol.exits import (
    KILLED,
    describe_returncode,
    signal_pids,
    still_alive,
)
from netspec.protocol.kinds import ComponentSpec
from netspec.protocol.names import as_name, safe_name
from netspec.protocol.packets import PacketsSpec

from . import leftovers
from .component import (
    KILL_GRACE_S,
    ComponentProcess,
    Outbox,
    StartRefused,
)
from .componentchannel import ComponentExited
from .faults import Faults
from .orphans import reap_adopted, run_processes_below
from .sampler import CampConfig
from .services import NodeServices

log = logging.getLogger("netspecd")


class Supervisor:
    """All components of one run on this host, owned by the connection that set them up."""

    def __init__(self, run_id: str, root: Path, specs: list[ComponentSpec], outbox: Outbox,
                 tg: asyncio.TaskGroup, host: str = "", streams: dict[str, Any] | None = None,
                 camp: CampConfig | None = None, packets: PacketsSpec | None = None):
        # Every name that becomes a path here is checked first: nothing is made outside `root`.
        self.root = root / safe_name(run_id, "run id")
        self.daemon_root = root
        self.held: Path | None = None  # its record on disk while set up (leftovers.py)
        self.run_id, self.tg, self.host = run_id, tg, safe_name(host, "host") if host else host
        # A component's claim of a role goes to the faults, which log it and tell the controller.
        self.components = {s.name: ComponentProcess(s, run_id, self.root, outbox,
                                                    lambda *claim: self.faults.claimed(*claim))
                           for s in specs}
        self.listed: set[str] = set()  # the paths the last `files` listed: all `read` may read
        self.join_token: bytes | None = None  # what a parent in the run's tree shows to join it
        self.was_reset = False  # no component starts once it is
        self.let_go = asyncio.Event()  # set once reset and its id free (Session.end_run)
        self._spawning: set[asyncio.Future[None]] = set()  # starts under way
        self.stream_configs = [StreamConfig.from_wire(safe_name(n, "stream"), d)
                               for n, d in (streams or {}).items()]
        self.services = NodeServices(run_id, host, self.root / "streams", camp, tuple(self.components),
                                     packets)
        self.outbox = outbox
        self.faults = Faults(self)  # the experiment's faults on this host (daemon/faults.py)
        for comp in self.components.values():
            comp.env[m.HOST_ENV] = host
            if not comp.spec.aware and self.stream_configs:
                # No phases reach a plain program: it logs for as long as it runs.
                comp.env[m.LOGGING_ENV] = json.dumps(self.logging_for(comp.spec.name))

    def hold(self) -> None:
        """Record on disk that this daemon holds the run, until its reset: should the daemon
        die hard, the next one started here ends what the run left (leftovers.py)."""
        try:
            self.held = leftovers.hold(self.daemon_root, self.run_id, self.host)
        except OSError as exc:  # a safety net, not the run's: said, and the run goes on
            log.warning("run %s: no record of it kept on disk (%s): should this daemon die hard, "
                        "the next will not end what the run leaves", self.run_id, exc)

    def running_pids(self) -> dict[str, int]:
        """Each started component that has not exited: name -> pid."""
        return {name: comp.proc.pid for name, comp in self.components.items()
                if comp.started and not comp.exited.done()}

    def logging_for(self, name: str) -> dict[str, Any]:
        """What a component needs to open its streams at start_logging."""
        chosen = {s.name: s.wire() for s in self.stream_configs
                  if s.components is None or name in s.components}
        return {"streams": chosen, "dir": str(self.services.directory), "host": self.host}

    async def enter(self, name: str, phase: str, params: dict[str, Any],
                    published: dict[str, Any], deadline: float | None = None,
                    step: int | None = None) -> dict[str, Any]:
        """Run `phase` (of step `step`) in component `name` and return the ack fields (never
        raises). `deadline` (loop time) is the step's: what stopping the component may wait
        until."""
        comp = self.components[name]
        if step is not None:
            comp.entered.append(step)  # an end in this phase is this step's (its Exit says so)
        try:
            return await self._enter(comp, phase, params, published, deadline)
        except ComponentExited as exc:
            if comp.verdict == KILLED:  # the schedule's fault ended it: its effect, not a failure
                return {"status": m.ACK_WARNING, "message": f"{exc} in phase '{phase}': killed by schedule",
                        "scheduled": True}
            ack: dict[str, Any] = {"status": m.ACK_ERROR, "message": f"{exc} in phase '{phase}'"}
            if comp.ended_in is not None and comp.ended_in != step:
                ack["ended_in"] = comp.ended_in  # its end was an earlier step's: this is its news
            return ack
        except StartRefused as exc:
            return {"status": m.ACK_ERROR, "message": str(exc)}
        finally:
            if step is not None:
                comp.entered.remove(step)

    async def _start(self, comp: ComponentProcess, phase: str) -> None:
        """Start a component, unless the run was reset; a reset waits for a start under way."""
        if self.was_reset:
            raise StartRefused(f"component '{comp.spec.name}' is not started in phase '{phase}': "
                               "the run was reset")
        spawned = asyncio.get_running_loop().create_future()
        self._spawning.add(spawned)
        try:
            await comp.start(self.tg, phase)
        finally:
            self._spawning.discard(spawned)
            spawned.set_result(None)
        assert comp.proc is not None
        self.services.started(comp.spec.name, comp.proc.pid)

    async def _enter(self, comp: ComponentProcess, phase: str, params: dict[str, Any],
                     published: dict[str, Any], deadline: float | None) -> dict[str, Any]:
        spec = comp.spec
        if phase == "collect":
            ack: dict[str, Any] = {"status": m.ACK_OK}
            if spec.aware and comp.started and "collect" in await comp.registered:
                ack = await comp.call(phase, params, published)
            info = await comp.stop(deadline=deadline)
            # As its Exit event judged it (an end before this stop was not asked for).
            if info and not comp.ended_well and not comp.forced:
                return {"status": m.ACK_ERROR, "message": describe_returncode(info["returncode"])}
            return ack
        if spec.aware:
            if phase == m.START_LOGGING:
                return await comp.call(phase, params, published, logging=self.logging_for(spec.name))
            if phase == "launch":
                await self._start(comp, phase)
                phases = await comp.registered
                ack = {"status": m.ACK_OK}
                if "launch" in phases:
                    ack = await comp.call(phase, params, published)
                return {**ack, "phases": phases}
            return await comp.call(phase, params, published)
        if phase == spec.start:
            await self._start(comp, phase)
            assert comp.proc is not None
            if spec.stop is not None:
                return {"status": m.ACK_OK, "message": f"started pid {comp.proc.pid}"}
            comp.awaited = True  # its end is this ack's news, not a death
            info = await comp.exited
            if comp.verdict == KILLED:
                return {"status": m.ACK_WARNING, "scheduled": True,
                        "message": f"{describe_returncode(info['returncode'])}: killed by schedule"}
            return {"status": m.ACK_OK if comp.ended_well else m.ACK_ERROR,
                    "message": describe_returncode(info["returncode"])}
        if phase == spec.stop:
            await comp.stop(deadline=deadline)
            if comp.forced:
                # Stopped all the same, as asked: worth a warning, not a failed run.
                return {"status": m.ACK_WARNING, "message": f"killed: {comp.forced_why}"}
            return {"status": m.ACK_OK, "message": "stopped"}
        return {"status": m.ACK_ERROR, "message": f"plain command takes no part in '{phase}'"}

    def pids(self) -> list[int]:
        return [pid for c in self.components.values() for pid in c.pids()]

    async def reset(self, clean: bool, deadline: float | None = None) -> int:
        """Kill every process of the run; with `clean`, delete its work directory. No
        component is started after (a launch racing the reset is refused, or, under way,
        waited for and killed with the rest).

        Args:
            clean: delete the run's work directory once its processes are gone.
            deadline: the loop time (the request's) until which killed processes are
                waited for; without one, KILL_GRACE_S after the SIGKILL.

        Returns the number of processes that had to be signalled.
        """
        self.was_reset = True
        loop = asyncio.get_running_loop()
        await self.faults.close()  # no fault after a reset; a pressure's processes and files gone
        if self._spawning:
            await asyncio.wait(self._spawning, timeout=KILL_GRACE_S)
        victims = await asyncio.to_thread(self._run_processes)
        for comp in self.components.values():
            comp.stopping = True
        signal_pids([p.pid for p in victims], signal.SIGTERM)
        if not await self._all_gone(victims, loop.time() + KILL_GRACE_S):
            signal_pids([p.pid for p in await asyncio.to_thread(self._run_processes)], signal.SIGKILL)
            until = loop.time() + KILL_GRACE_S if deadline is None else deadline
            await self._all_gone(victims, until)
        reap_adopted()
        # Each component's own end: whatever the signals above left is killed, its exit
        # waited for (its report sent) and its channel closed.
        until = loop.time() + KILL_GRACE_S if deadline is None else deadline
        async with asyncio.TaskGroup() as closing:
            for comp in self.components.values():
                closing.create_task(comp.close(until))
        self.services.close()
        leftovers.release(self.held)  # nothing of it left here (a close that failed raised)
        if clean:
            shutil.rmtree(self.root, ignore_errors=True)
        return len(victims)

    def _run_processes(self) -> list[psutil.Process]:
        return run_processes_below(self.run_id, self.pids(), self.host)

    async def _all_gone(self, victims: list[psutil.Process], deadline: float) -> bool:
        """Wait until no process of the run is alive. Orphans are not our children and
        cannot be waited for (and our children are asyncio's to reap), so the victims are
        watched in /proc until they are gone; then the run's processes are looked for once
        more, for any they started meanwhile."""
        while True:
            victims = still_alive(victims)
            if not victims:
                victims = await asyncio.to_thread(self._run_processes)
                if not victims:
                    return True
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.01)

    def collectable(self) -> list[dict[str, Any]]:
        """Every file the controller should gather, with its size: outputs, exit status,
        handed-back files and the run's streams on this host. Only regular files: a FIFO
        or device is listed as missing, so that nothing ever waits on one."""
        files = self.services.collectable()
        for comp in self.components.values():
            for name in ("stdout", "stderr", "exit.json"):
                path = comp.dir / name
                if path.exists():
                    files.append({"component": comp.spec.name, "name": name, "path": str(path)})
            taken: set[str] = set()
            for handed in dict.fromkeys(comp.handed_back):  # each path once, in order
                path = Path(handed)
                name = _unique(as_name(path.name), taken)
                files.append({"component": comp.spec.name, "name": f"files/{name}", "path": str(path)})
        for f in files:
            try:
                st = os.stat(f["path"])
                regular = stat.S_ISREG(st.st_mode)
            except OSError:
                regular = False
            f["missing"], f["size"] = not regular, st.st_size if regular else 0
        return files


def _unique(name: str, taken: set[str]) -> str:
    """`name`, or name-2.ext, name-3.ext...: two handed-back files of one name (from two
    directories, or two names made alike by as_name) must not land on one file."""
    stem, dot, ext = name.partition(".") if not name.startswith(".") else (name, "", "")
    unique, n = name, 1
    while unique in taken:
        n += 1
        unique = f"{stem}-{n}{dot}{ext}"
    taken.add(unique)
    return unique

