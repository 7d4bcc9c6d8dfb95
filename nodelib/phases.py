"""The phase API for NETSPEC-aware applications (LibNETSPEC's role).

An application registers one callback per phase, then hands control to `run()`, which
talks to the local netspecd over the socketpair it inherited and calls each callback when
the controller enters that phase. A callback's return or exception becomes the phase ack.
"""

from __future__ import annotations

import _thread  # for one lock: threading's import is a program's start to pay for (nodelib's imports)
import os
import time
from collections.abc import Callable
from pathlib import Path

from netspec.protocol import messages as m
from netspec.protocol.blockingchannel import BlockingChannel
from netspec.protocol.errors import NetspecError

from . import instrument

TYPE_CHECKING = False  # typing's own flag, without importing typing: a program's start (nodelib's imports)
if TYPE_CHECKING:
    from typing import Any


class PhaseWarning(Exception):
    """Raise from a callback to ack its phase with a warning instead of an error."""


class PhaseContext:
    """What a phase callback gets: the phase, who it is (`component`, `host`), its
    parameters, and ways to report back.

    Attributes:
        phase: the phase being entered.
        component: this component's name in the experiment file.
        run_id: the run's id.
        params: the component's `params:`, with the step's own `params:` over them.
        published: what every component published in earlier phases, by component
            (`lookup` reads it).
        workdir: the component's working directory, where a relative `hand_back` path is.
        files: the files asked for with `hand_back` in this phase.
        warnings: the warnings given with `warn` in this phase.
        publishes: the values given to `publish` in this phase.
    """

    # A plain class, not a dataclass: `dataclasses` imports `inspect` (and ast, dis, tokenize),
    # some 20 ms, about half of bare Python's start, paid by every program before it registers.
    def __init__(self, phase: str, component: str, run_id: str, params: dict[str, Any],
                 published: dict[str, dict[str, Any]], workdir: Path):
        self.phase, self.component, self.run_id = phase, component, run_id
        self.params, self.published, self.workdir = params, published, workdir
        self.files: list[str] = []
        self.warnings: list[str] = []
        self.publishes: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"PhaseContext(phase={self.phase!r}, component={self.component!r}, run_id={self.run_id!r})"

    @property
    def host(self) -> str:
        """The experiment file's name of the host this component runs on."""
        return os.environ.get(m.HOST_ENV, "")

    @property
    def host_address(self) -> str:
        """The address other hosts reach this one at: publish it with a listening port."""
        return os.environ.get(m.HOST_ADDRESS_ENV, "127.0.0.1")

    def hand_back(self, path: str | os.PathLike[str]) -> None:
        """Ask for a file to be collected into the run directory at collect."""
        p = Path(path)
        self.files.append(str(p if p.is_absolute() else self.workdir / p))

    def warn(self, message: str) -> None:
        """Ack this phase with a warning; the run goes on."""
        self.warnings.append(message)

    def publish(self, **values: Any) -> None:
        """Make values visible to every component in later phases (e.g. a listening port)."""
        self.publishes.update(values)

    def lookup(self, component: str, key: str) -> Any:
        """A value that `component` published in an earlier phase."""
        try:
            return self.published[component][key]
        except KeyError:
            raise NetspecError(f"component '{component}' has not published '{key}' "
                               f"before phase '{self.phase}'") from None


if TYPE_CHECKING:
    PhaseCallback = Callable[[PhaseContext], Any]


class Application:
    """A NETSPEC-aware program: phase callbacks plus the loop that runs them. The module's
    `nodelib.phase`, `register` and `run` are the process's one Application's; make another
    only to keep apart several sets of callbacks.

    Attributes:
        callbacks: each registered phase's callback, by phase name.
    """

    def __init__(self) -> None:
        self.callbacks: dict[str, PhaseCallback] = {}
        self.channel: BlockingChannel | None = None  # while `run` talks to netspecd
        self._sending = _thread.allocate_lock()  # a claim may come from any thread, between acks

    def register(self, name: str, callback: PhaseCallback) -> None:
        """Run `callback` when the controller enters phase `name`."""
        if name in self.callbacks:
            raise NetspecError(f"phase '{name}' is registered twice")
        self.callbacks[name] = callback

    def phase(self, name: str | None = None) -> Callable[[PhaseCallback], PhaseCallback]:
        """Decorator form of `register`; the phase name defaults to the function's name."""
        def decorate(callback: PhaseCallback) -> PhaseCallback:
            self.register(name or callback.__name__, callback)
            return callback
        return decorate

    def run(self) -> None:
        """Hand control to netspec until the daemon says stop.

        Raises:
            NetspecError: the program was not started by netspecd.
        """
        fd = os.environ.get(m.FD_ENV)
        if fd is None:
            raise NetspecError(f"{m.FD_ENV} is not set: run this program from an experiment "
                               "file with `ns_control run`")
        channel = BlockingChannel(int(fd))
        try:
            self._serve(channel)
        finally:
            with self._sending:
                self.channel = None
                channel.close()

    def claim(self, role: str, held: bool = True) -> None:
        """Say that this component now holds `role` (e.g. "leader"; `held=False`: that it
        let it go). A fault aimed at the role (`{kill: {role: leader}}`) takes the component
        whose claim of it came last, and not let go, at its instant; the claim's instant is
        recorded with the fault. Any thread may call it while `run` runs.

        Raises:
            NetspecError: `role` is not a role's name, or the program is not in `run`.
        """
        if not m.is_role(role):
            raise NetspecError(f"{role!r} is not a role: 1 to {m.MAX_ROLE} letters, digits, '_', '-' or '.'")
        with self._sending:
            if self.channel is None:
                raise NetspecError("a role is claimed while nodelib.run() talks to netspecd")
            self.channel.send({"t": m.CLAIM, "role": role, "held": bool(held), "at": time.time_ns()})

    def _send(self, channel: BlockingChannel, message: dict[str, Any]) -> None:
        with self._sending:
            channel.send(message)

    def _serve(self, channel: BlockingChannel) -> None:
        # Every aware component takes part in the logging steps: nodelib opens and closes
        # its streams there, around the application's own callback if it has one.
        phases = sorted({*self.callbacks, m.START_LOGGING, m.STOP_LOGGING})
        channel.send({"t": m.REGISTER, "phases": phases, "pid": os.getpid()})
        welcome = channel.recv()
        if welcome is None or welcome["t"] != m.WELCOME:
            raise NetspecError("netspecd did not welcome this component")
        self.channel = channel
        component, run_id = welcome["component"], welcome["run"]
        while (message := channel.recv()) is not None and message["t"] != m.STOP:
            if message["t"] == m.ENTER:
                ctx = PhaseContext(message["phase"], component, run_id, message.get("params", {}),
                                   message.get("published", {}), Path.cwd())
                self._send(channel, {"t": m.ACK, "id": message["id"],
                                     **self._call(ctx, message.get("logging"))})

    def _enter(self, ctx: PhaseContext, logging: dict[str, Any] | None) -> Any:
        if ctx.phase == m.START_LOGGING and logging is not None:
            instrument.default.start(*instrument.streams_from(logging, ctx.component, ctx.run_id))
        callback = self.callbacks.get(ctx.phase)
        try:
            return callback(ctx) if callback is not None else None
        finally:
            if ctx.phase == m.STOP_LOGGING:
                instrument.default.stop()  # after the callback: it may log final states

    def _call(self, ctx: PhaseContext, logging: dict[str, Any] | None = None) -> dict[str, Any]:
        started = time.time_ns()
        status, text, tb = m.ACK_OK, "", ""
        try:
            value = self._enter(ctx, logging)
            text = "" if value is None else str(value)
        except PhaseWarning as exc:
            status, text = m.ACK_WARNING, str(exc)
        except Exception as exc:
            # The user's frames are the story; this module's only lead to them.
            tb = exc.__traceback__
            while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename == __file__:
                tb = tb.tb_next
            err = m.error_map(exc.with_traceback(tb))
            status, text, tb = m.ACK_ERROR, f"{err['type']}: {err['message']}", err["traceback"]
        if status == m.ACK_OK and ctx.warnings:
            status = m.ACK_WARNING
        text = "; ".join(t for t in [text, *ctx.warnings] if t)
        return {"status": status, "message": text, "traceback": tb, "files": ctx.files,
                "published": ctx.publishes, "started": started, "ended": time.time_ns()}


def component_params() -> dict[str, Any]:
    """The component's `params:` from the experiment file, for plain programs too."""
    import json  # here: a phase's params come over the channel, and json is a program's own choice

    return json.loads(os.environ.get(m.PARAMS_ENV, "{}"))
