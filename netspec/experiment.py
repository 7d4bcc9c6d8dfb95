"""An experiment file from Python: loaded and checked (every error, as `ns_control check`
gives them), and run with parameter overrides, as `ns_control run` runs it, into the same
run directory.

    from netspec import experiment

    checked = experiment.check("exp.yaml")    # never raises for the file's errors
    for error in checked.errors:               # each a ConfigError: file, line, key, reason
        print(error)
    run = experiment.run("exp.yaml", {"client.count": 500})   # a netspec.results.Run
    print(run.outcome.status)

Nothing is printed unless an output is given (`output=Terminal()` prints as ns_control does).
From a Jupyter cell (an event loop runs there) or a thread, a run goes in a process of its own.
docs/api.md describes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netspec.controller.engine.runner import Output, RunOptions, Silent, run_plan
from netspec.controller.engine.terminal import Terminal
from netspec.controller.experiment import load as loader
from netspec.controller.experiment.model import Plan
from netspec.protocol.errors import ConfigError, ConfigErrors, NetspecError
from netspec.protocol.messages import PRIVATE_UMASK
from netspec.protocol.runoutcome import EXIT_INTERRUPTED

from .results import RUNS, Run, open_run

__all__ = ["Checked", "ConfigError", "ConfigErrors", "Experiment", "NetspecError", "Output", "Terminal",
           "check", "load", "run"]


@dataclass(frozen=True)
class Experiment:
    """A checked experiment file: what it runs, and on what.

    Attributes:
        path: the file.
        name: its `experiment:` name.
        hosts: its hosts' names (a group's members each).
        components: its components' names (a group component's members each).
        schedule: the phases of its steps, in order (launch and collect included).
        params: every component's param as `COMPONENT.PARAM`: what `run` can override.
        points: a campaign's points (its sweep), each a map of its swept parameters to a value;
            () for a file without `sweep:`.
        warnings: what checking found odd but legal, each "file:line: key: text".
    """

    path: Path
    name: str
    hosts: tuple[str, ...]
    components: tuple[str, ...]
    schedule: tuple[str, ...]  # the phases, in order
    params: dict[str, Any]  # every component's param as COMPONENT.PARAM: what `run` can override
    points: tuple[dict[str, Any], ...]  # a campaign's points (its sweep); () for a plain file
    warnings: tuple[str, ...]  # what check found odd but legal, each "file:line: key: text"
    _plan: Plan = field(repr=False, compare=False)  # the controller's own model of it: not public


@dataclass(frozen=True)
class Checked:
    """What checking a file found: every error (file:line: key: reason), its warnings, and
    the experiment when there was no error.

    Attributes:
        errors: every error, each a `ConfigError` (`file`, `line`, `key`, `reason`), in the
            order and words of `ns_control check`.
        warnings: what checking found odd but legal.
        experiment: the checked `Experiment`; None where there is an error.
    """

    errors: tuple[ConfigError, ...]
    warnings: tuple[str, ...]
    experiment: Experiment | None

    @property
    def ok(self) -> bool:
        """Whether the file has no error."""
        return not self.errors


def _experiment(plan: Plan) -> Experiment:
    return Experiment(plan.path, plan.name, tuple(h.name for h in plan.hosts),
                      tuple(c.name for c in plan.components), tuple(s.phase for s in plan.schedule),
                      {f"{c.name}.{k}": v for c in plan.components for k, v in c.params.items()},
                      plan.campaign.points if plan.campaign else (), plan.warnings, plan)


def load(path: str | Path) -> Experiment:
    """The experiment file at `path`, checked.

    Raises:
        ConfigError: the file cannot be read, or has errors: a ConfigErrors then, whose
            `errors` are every one found, each with its file, line and key.
    """
    return _experiment(loader.load(path))


def check(path: str | Path) -> Checked:
    """Every error and warning of the file at `path`, as `ns_control check` gives them.
    Its errors are returned, not raised."""
    try:
        plan = loader.load(path)
    except ConfigErrors as exc:
        return Checked(tuple(exc.errors), (), None)
    except ConfigError as exc:
        return Checked((exc,), (), None)
    return Checked((), plan.warnings, _experiment(plan))


def _with_params(experiment: Experiment, params: Mapping[str, Any]) -> Plan:
    """The plan of `experiment` with `params` (COMPONENT.PARAM: value) in its components'
    params, checked as a campaign's sweep checks its points: each names a param the
    component declares, with a value of the declared one's type.

    Raises:
        ConfigErrors: every override that does not hold, naming the file and the key.
    """
    errors = []
    for key, value in params.items():
        declared = experiment.params.get(key, _NONE)
        if declared is _NONE:
            component = key.rpartition(".")[0]
            why = (f"component '{component}' declares no such param (it has: "
                   f"{', '.join(k for k in experiment.params if k.startswith(component + '.')) or 'none'})"
                   if component in experiment.components else
                   f"no component '{component}' (the file has: {', '.join(experiment.components)})")
            errors.append(ConfigError(f"cannot override: {why}", str(experiment.path), key=key))
        elif not (declared is None or type(value) is type(declared)
                  or (type(declared) is float and type(value) is int)):
            errors.append(ConfigError(f"cannot override: {value!r} is of type {type(value).__name__}, and "
                                      f"the file's {declared!r} of type {type(declared).__name__}",
                                      str(experiment.path), key=key))
    if errors:
        raise ConfigErrors(errors)
    plan = experiment._plan
    return loader.parse(plan.text, plan.path, point=dict(params)) if params else plan


_NONE = object()


def run(experiment: Experiment | str | Path, params: Mapping[str, Any] | None = None, *,
        runs: str | Path = RUNS, output: Output | None = None, merge: bool = True,
        share_hosts: bool = False, accept_new_host_keys: bool = False) -> Run:
    """Run an experiment as `ns_control run` does: a new run directory under `runs`, the
    phase engine (Ctrl-C interrupts the run as it does the command's), the merge at the end.
    `params` override the components' params (COMPONENT.PARAM: value), as one point of a
    sweep does; the run directory keeps the file with their values. A campaign file runs
    one of its points: the one `params` gives.

    A run owns its thread's event loop and the process's signal handlers; called where it
    cannot (an event loop already runs there, as in a Jupyter cell, or not the main thread),
    it runs in a Python process of its own, to which Ctrl-C here is passed on, and what it
    says reaches `output` when it ends.

    Returns:
        The run, opened (netspec.results.Run): its outcome, record, steps and tables.

    Raises:
        ConfigError: the file has errors (ConfigErrors: every one), a param override does
            not hold, or a campaign file was given no point.
        NetspecError: the run's own process ended without making a run (its last words).
    """
    if not isinstance(experiment, Experiment):
        experiment = load(experiment)
    if experiment.points and not params:
        raise ConfigError("a campaign file: give its point as params= to run one run of it, or run the "
                          "campaign with `ns_control run`", str(experiment.path))
    plan = _with_params(experiment, params or {})
    options = RunOptions(Path(runs).resolve(), quiet=output is None, output=output or Silent(), merge=merge,
                         share_hosts=share_hosts, accept_new_host_keys=accept_new_host_keys)
    if not _owns_its_thread():
        return _run_apart(experiment.path, dict(params or {}), options, output)
    return open_run(_run_here(plan, options))


def _owns_its_thread() -> bool:
    """Whether a run can own this thread: the main thread (signals), with no event loop running."""
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return True
    return False


def _run_here(plan: Plan, options: RunOptions, told: Path | None = None) -> Path:
    umask = os.umask(PRIVATE_UMASK)  # as ns_control: the run directory is its owner's alone
    try:
        rundir, _ = run_plan(plan, options, created=None if told is None else (
            lambda rundir: told.write_text(str(rundir.path))))
    finally:
        os.umask(umask)
    return rundir.path


def _run_apart(path: Path, params: dict[str, Any], options: RunOptions, output: Output | None) -> Run:
    """The run in a Python process of its own (`_apart`), ended on every way out of here.
    Ctrl-C here is passed on to it, once per Ctrl-C: the first interrupts the run, which
    gathers what it has and merges it, as ns_control's does; a second stops it at once."""
    with tempfile.TemporaryDirectory() as tmp:
        told = Path(tmp) / "run"
        spec = {"file": str(path), "params": params, "runs": str(options.runs), "print": output is not None,
                "merge": options.merge, "share_hosts": options.share_hosts,
                "accept_new_host_keys": options.accept_new_host_keys, "told": str(told)}
        # A session of its own: a terminal's Ctrl-C reaches it once, through this process.
        with subprocess.Popen([sys.executable, "-c", "import sys; from netspec.experiment import _apart; "
                               "_apart(sys.argv[1])", json.dumps(spec)], text=True, start_new_session=True,
                              stdout=subprocess.PIPE if output else subprocess.DEVNULL,
                              stderr=subprocess.PIPE) as proc:
            try:
                said, errors = _communicate(proc)
            finally:
                if proc.poll() is None:  # an error of ours, not the run's: it goes no further
                    # Its whole session (start_new_session: its group is its pid), not only
                    # the Python child: the daemons it forked go with it.
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        if output is not None:
            for line in said.splitlines():
                output.out(line)
            output.err(errors.splitlines())
        if not told.exists():
            last = "\n".join(errors.splitlines()[-10:])
            raise NetspecError(f"the run's own process ended with {proc.returncode} before a run started"
                               + (f":\n{last}" if last else ""))
        return open_run(Path(told.read_text()))


def _communicate(proc: subprocess.Popen[str]) -> tuple[str, str]:
    while True:
        try:
            return proc.communicate()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)  # the run's own Ctrl-C; what it read so far is kept


def _apart(spec: str) -> None:
    """A run in this process, for `_run_apart`, which gave `spec`; the run directory is told
    as soon as it is made."""
    given = json.loads(spec)
    plan = _with_params(load(given["file"]), given["params"])
    options = RunOptions(Path(given["runs"]), quiet=not given["print"], output=Terminal() if given["print"]
                         else Silent(), merge=given["merge"], share_hosts=given["share_hosts"],
                         accept_new_host_keys=given["accept_new_host_keys"])
    try:
        _run_here(plan, options, Path(given["told"]))
    except KeyboardInterrupt:  # a merge interrupted (said, and noted in run.json), or a Ctrl-C before the run
        sys.exit(EXIT_INTERRUPTED)
