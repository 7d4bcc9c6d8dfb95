"""Spawn, watch and reap the components of one experiment on this host.

Each component runs in its own process group with stdout/stderr captured to files and
streamed to the controller. NETSPEC-aware components get one end of a socketpair (its fd
named by NETSPEC_FD); plain commands are started at one phase and stopped at another.
Reset kills every process that carries the run's id in its environment, so even a
grandchild that left the process group and was re-parented is not left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil
from netspec.datastream.writer import StreamConfig
from netspec.protocol import events
from netspec.protocol import messages as m
from netspec.protocol.channel import Channel
from netspec.protocol.errors import NetspecError, ProtocolError
from netspec.protocol.exits import (
    descendants,
    describe_returncode,
    ended_well,
    signal_pids,
    still_alive,
)
from netspec.protocol.names import as_name, safe_name

from .facts import host_address
from .orphans import SPAWNED, reap_adopted, run_processes_below
from .sampler import CampConfig
from .services import NodeServices

log = logging.getLogger("netspecd")

STOP_GRACE_S = 5.0
KILL_GRACE_S = 2.0
OUTPUT_GRACE_S = 1.0
PR_SET_PDEATHSIG = 1

class Outbox(Protocol):
    """Where events for the controller go (the session's connection)."""

    def emit(self, message: dict[str, Any]) -> None: ...

    async def drain(self) -> None:
        """Wait while the controller is behind; returns at once if it is gone."""


class ComponentExited(NetspecError):
    """The component's process ended while something still waited on it."""


@dataclass(frozen=True)
class ComponentSpec:
    """A component as the controller hands it to the daemon."""

    name: str
    argv: list[str]
    aware: bool
    params: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    start: str = "launch"
    stop: str | None = None

    @classmethod
    def from_wire(cls, d: dict[str, Any]) -> ComponentSpec:
        """`program` (+ `args`) names a NETSPEC-aware program; `argv` a plain command."""
        aware = "program" in d
        argv = python_argv(d["program"], list(d.get("args", []))) if aware else list(d["argv"])
        return cls(safe_name(d["name"], "component"), argv, aware, dict(d.get("params", {})),
                   dict(d.get("env", {})), d.get("start", "launch"), d.get("stop"))


def _die_with_daemon() -> None:
    """In the child before exec: be killed if the daemon dies without resetting."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class _ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Tells when the process exits. asyncio's `Process.wait()` (3.11) also waits until
    the pipes close, which a background child can put off for as long as it lives."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        super().__init__(limit=2**16, loop=loop)
        self.exit_code: asyncio.Future[int] = loop.create_future()

    def process_exited(self) -> None:
        # Read first: the base class drops the transport once the pipes are closed too.
        code = self._transport.get_returncode()
        SPAWNED.discard(self._transport.get_pid())
        super().process_exited()
        if not self.exit_code.done():
            self.exit_code.set_result(code)


class ComponentProcess:
    """One spawned component: its process, its channel (if aware) and its output files."""

    def __init__(self, spec: ComponentSpec, run_id: str, root: Path, outbox: Outbox):
        self.spec, self.run_id, self.outbox = spec, run_id, outbox
        self.dir = root / spec.name
        self.workdir = self.dir / "work"
        self.proc: asyncio.subprocess.Process | None = None
        self.channel: Channel | None = None
        self.registered: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        self.exited: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.handed_back: list[str] = []
        self.stopping = False
        self.forced = False  # netspec had to SIGKILL it after the stop grace
        self.env: dict[str, str] = {}  # set by the supervisor: what only it knows
        self.started_ns = 0
        self._next_id = 0

    @property
    def started(self) -> bool:
        return self.proc is not None

    async def start(self, tg: asyncio.TaskGroup) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.spec.env, m.RUN_ENV: self.run_id,
               m.COMPONENT_ENV: self.spec.name, m.PARAMS_ENV: json.dumps(self.spec.params),
               m.HOST_ADDRESS_ENV: host_address(), **self.env,
               "PYTHONUNBUFFERED": "1"}
        pass_fds: tuple[int, ...] = ()
        ours = theirs = None
        if self.spec.aware:
            ours, theirs = socket.socketpair()
            env[m.FD_ENV] = str(theirs.fileno())
            pass_fds = (theirs.fileno(),)
        loop = asyncio.get_running_loop()
        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _ExitProtocol(loop), *self.spec.argv, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=self.workdir,
                env=env, pass_fds=pass_fds, start_new_session=True, preexec_fn=_die_with_daemon)
        except OSError as exc:
            if ours:
                ours.close()
            raise ComponentExited(f"cannot start {self.spec.argv[0]!r}: {exc.strerror}") from exc
        finally:
            if theirs:
                theirs.close()
        self.proc = asyncio.subprocess.Process(transport, protocol, loop)
        if not protocol.exit_code.done():
            SPAWNED.add(self.proc.pid)
        self.started_ns = time.time_ns()
        pumps = [tg.create_task(self._pump(self.proc.stdout, "stdout")),
                 tg.create_task(self._pump(self.proc.stderr, "stderr"))]
        if ours:
            self.channel = await Channel.over(ours, peer=f"component {self.spec.name}")
            tg.create_task(self._read_channel())
        tg.create_task(self._watch_exit(protocol.exit_code, pumps))

    async def _pump(self, pipe: asyncio.StreamReader | None, stream: str) -> None:
        assert pipe is not None
        with open(self.dir / stream, "wb") as f:
            while data := await pipe.read(65536):
                f.write(data)
                f.flush()
                self.outbox.emit({"t": m.OUTPUT, "component": self.spec.name,
                                  "stream": stream, "data": data})
                # A component that writes faster than the controller reads is held back
                # by its pipe, instead of growing this daemon's memory.
                await self.outbox.drain()

    async def _read_channel(self) -> None:
        assert self.channel is not None
        try:
            while (message := await self.channel.recv()) is not None:
                if message["t"] == m.REGISTER and not self.registered.done():
                    self.channel.send({"t": m.WELCOME, "component": self.spec.name,
                                       "run": self.run_id})
                    self.registered.set_result(list(message.get("phases", [])))
                elif message["t"] == m.ACK:
                    waiter = self.pending.pop(message.get("id"), None)
                    if waiter and not waiter.done():
                        waiter.set_result(message)
        except ConnectionError:
            # Its end went away (a process killed with an enter unread resets it): its exit,
            # watched below, says why to everything waiting on it.
            await self.channel.close()
        except ProtocolError as exc:
            # The stream cannot be trusted after a bad frame: drop it, and let everything
            # waiting on this component know now rather than at its deadline.
            self._fail_waiters(ComponentExited(f"broke the netspec protocol ({exc})"))
            await self.channel.close()

    async def _watch_exit(self, exit_code: asyncio.Future[int],
                          pumps: list[asyncio.Task[None]]) -> None:
        code = await exit_code
        # The exit is reported once its output is complete, so its tail is too; but a
        # background child may hold the pipes open long after, so not for ever.
        await asyncio.wait(pumps, timeout=OUTPUT_GRACE_S)
        info = {"component": self.spec.name, "returncode": code, "argv": self.spec.argv,
                "duration_s": (time.time_ns() - self.started_ns) / 1e9,
                "expected": self.stopping, "ended_ns": time.time_ns()}
        (self.dir / "exit.json").write_text(json.dumps(info, indent=1) + "\n")
        # The exit goes before any ack it cuts short or lets through (a phase's, or
        # collect's): the controller learns of a death first (in a k-of-n step it is that
        # participant's failure, not the run's), and of every end before its step's end.
        self.outbox.emit({"t": m.EXIT, **info, "failed": code != 0 and not self.stopping})
        self.exited.set_result(info)
        self._fail_waiters(ComponentExited(describe_returncode(code)))
        log.info("run %s: component %s %s after %.3f s", self.run_id, self.spec.name,
                 describe_returncode(code), info["duration_s"])
        if self.channel:
            await self.channel.close()

    def _fail_waiters(self, error: ComponentExited) -> None:
        for waiter in [self.registered, *self.pending.values()]:
            if not waiter.done():
                waiter.set_exception(error)
                waiter.exception()  # marks it retrieved: a plain command's has no waiter
        self.pending.clear()

    async def call(self, phase: str, params: dict[str, Any], published: dict[str, Any],
                   **fields: Any) -> dict[str, Any]:
        """Enter `phase` in an aware component and return its ack; `fields` go along."""
        if self.channel is not None and self.channel.closing and not self.exited.done():
            # Its end of the channel closed: it is ending (or will not ack); its exit is the news.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), OUTPUT_GRACE_S + KILL_GRACE_S)
        if self.channel is None or self.exited.done() or self.channel.closing:
            code = self.exited.result()["returncode"] if self.exited.done() else None
            raise ComponentExited(f"{describe_returncode(code)} and cannot take part")
        self._next_id += 1
        waiter = asyncio.get_running_loop().create_future()
        self.pending[self._next_id] = waiter
        self.channel.send({"t": m.ENTER, "id": self._next_id, "phase": phase, "params": params,
                           "published": published, **fields})
        ack = await waiter
        if wrong := events.component_ack_problem(ack):
            # The component's fault, said as its own: not passed on for the controller to refuse.
            return {"status": m.ACK_ERROR, "message": f"the component sent {wrong}: {str(ack)[:200]}"}
        self.handed_back.extend(ack.get("files", []))
        # Only what a component may say goes on: the rest of an ack is the daemon's to add.
        return {k: ack[k] for k in events.COMPONENT_ACK_FIELDS if k in ack}

    async def stop(self, grace: float = STOP_GRACE_S) -> dict[str, Any]:
        """Ask the component to end (STOP message or SIGTERM), then kill what remains."""
        if not self.started:
            return {}
        self.stopping = True
        if not self.exited.done():
            if self.channel is not None:
                with contextlib.suppress(NetspecError, ConnectionError):
                    self.channel.send({"t": m.STOP})
            else:
                self.signal_group(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                return await asyncio.wait_for(asyncio.shield(self.exited), grace)
            # Only this component's processes: the rest of the run goes on.
            self.forced = True
            pids = self.pids()
            self.signal_group(signal.SIGKILL)
            signal_pids(pids, signal.SIGKILL)
        try:
            return await asyncio.wait_for(asyncio.shield(self.exited), KILL_GRACE_S)
        except TimeoutError:  # e.g. stuck in the kernel (D state): said, not waited on for ever
            raise ComponentExited(f"did not end within {KILL_GRACE_S:g} s of SIGKILL") from None

    def pids(self) -> list[int]:
        """The component's process and every descendant it still has."""
        if self.proc is None or self.exited.done():
            return []
        return [self.proc.pid, *descendants(self.proc.pid)]

    def signal_group(self, sig: signal.Signals) -> None:
        if self.proc is not None and not self.exited.done():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)


class Supervisor:
    """All components of one run on this host, owned by the connection that set them up."""

    def __init__(self, run_id: str, root: Path, specs: list[ComponentSpec], outbox: Outbox,
                 tg: asyncio.TaskGroup, host: str = "", streams: dict[str, Any] | None = None,
                 camp: CampConfig | None = None):
        # Every name that becomes a path here is checked first: nothing is made outside `root`.
        self.root = root / safe_name(run_id, "run id")
        self.run_id, self.tg, self.host = run_id, tg, safe_name(host, "host") if host else host
        self.components = {s.name: ComponentProcess(s, run_id, self.root, outbox) for s in specs}
        self.listed: set[str] = set()  # the paths the last `files` listed: all `read` may read
        self.stream_configs = [StreamConfig.from_wire(safe_name(n, "stream"), d)
                               for n, d in (streams or {}).items()]
        self.services = NodeServices(run_id, host, self.root / "streams", camp, tuple(self.components))
        for comp in self.components.values():
            comp.env[m.HOST_ENV] = host
            if not comp.spec.aware and self.stream_configs:
                # No phases reach a plain program: it logs for as long as it runs.
                comp.env[m.LOGGING_ENV] = json.dumps(self.logging_for(comp.spec.name))

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
                    published: dict[str, Any]) -> dict[str, Any]:
        """Run `phase` in component `name` and return the ack fields (never raises)."""
        comp = self.components[name]
        try:
            return await self._enter(comp, phase, params, published)
        except ComponentExited as exc:
            return {"status": m.ACK_ERROR, "message": f"{exc} in phase '{phase}'"}

    async def _enter(self, comp: ComponentProcess, phase: str, params: dict[str, Any],
                     published: dict[str, Any]) -> dict[str, Any]:
        spec = comp.spec
        if phase == "collect":
            ack: dict[str, Any] = {"status": m.ACK_OK}
            if spec.aware and comp.started and "collect" in await comp.registered:
                ack = await comp.call(phase, params, published)
            info = await comp.stop()
            if info and not ended_well(info["returncode"]) and not comp.forced:
                return {"status": m.ACK_ERROR, "message": describe_returncode(info["returncode"])}
            return ack
        if spec.aware:
            if phase == m.START_LOGGING:
                return await comp.call(phase, params, published, logging=self.logging_for(spec.name))
            if phase == "launch":
                await comp.start(self.tg)
                self.services.started(spec.name, comp.proc.pid)
                phases = await comp.registered
                ack = {"status": m.ACK_OK}
                if "launch" in phases:
                    ack = await comp.call(phase, params, published)
                return {**ack, "phases": phases}
            return await comp.call(phase, params, published)
        if phase == spec.start:
            await comp.start(self.tg)
            self.services.started(spec.name, comp.proc.pid)
            if spec.stop is not None:
                return {"status": m.ACK_OK, "message": f"started pid {comp.proc.pid}"}
            comp.stopping = True
            info = await comp.exited
            ok = info["returncode"] == 0
            return {"status": m.ACK_OK if ok else m.ACK_ERROR,
                    "message": describe_returncode(info["returncode"])}
        if phase == spec.stop:
            await comp.stop()
            if comp.forced:
                # Stopped all the same, as asked: worth a warning, not a failed run.
                return {"status": m.ACK_WARNING, "message": f"ignored SIGTERM for {STOP_GRACE_S:g} s; "
                        "killed"}
            return {"status": m.ACK_OK, "message": "stopped"}
        return {"status": m.ACK_ERROR, "message": f"plain command takes no part in '{phase}'"}

    def pids(self) -> list[int]:
        return [pid for c in self.components.values() for pid in c.pids()]

    async def reset(self, clean: bool) -> int:
        """Kill every process of the run; with `clean`, delete its work directory.

        Returns the number of processes that had to be signalled.
        """
        victims = await asyncio.to_thread(self._run_processes)
        for comp in self.components.values():
            comp.stopping = True
        signal_pids([p.pid for p in victims], signal.SIGTERM)
        if not await self._all_gone(victims, KILL_GRACE_S):
            signal_pids([p.pid for p in await asyncio.to_thread(self._run_processes)], signal.SIGKILL)
            await self._all_gone(victims, KILL_GRACE_S)
        reap_adopted()
        waits = [c.exited for c in self.components.values() if c.started]
        if waits:
            await asyncio.wait(waits, timeout=KILL_GRACE_S)
        self.services.close()
        if clean:
            shutil.rmtree(self.root, ignore_errors=True)
        return len(victims)

    def _run_processes(self) -> list[psutil.Process]:
        return run_processes_below(self.run_id, self.pids(), self.host)

    async def _all_gone(self, victims: list[psutil.Process], timeout: float) -> bool:
        """Wait until no process of the run is alive. Orphans are not our children and
        cannot be waited for (and our children are asyncio's to reap), so the victims are
        watched in /proc until they are gone; then the run's processes are looked for once
        more, for any they started meanwhile."""
        deadline = asyncio.get_running_loop().time() + timeout
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


def python_argv(program: str, args: list[str]) -> list[str]:
    """A .py program runs under the daemon's own interpreter, which has nodelib."""
    return [sys.executable, program, *args] if program.endswith(".py") else [program, *args]
