"""One run of a plan as ns_control shows it: its run directory, the phase engine under
Ctrl-C and SIGTERM, the summary, and the merge at the end; the exit code says how it went."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from netspec.analysis.graph import user_filter
from netspec.analysis.usercode import NONE, UserCode
from netspec.protocol.auth import load_or_create_key
from netspec.protocol.errors import NetspecError
from netspec.protocol.messages import netspec_version
from netspec.protocol.runoutcome import RunOutcome
from netspec.protocol.runrecord import MERGED, RunStatus

from ..experiment.model import Plan
from ..record.progress import Progress
from ..record.rundir import RunDir, note_merge
from . import summary
from .run import Run


class Output(Protocol):
    """Where a run's lines go: cli.py's Terminal prints them (only cli.py prints)."""

    def out(self, text: str, end: bool = True) -> None:
        """A line of progress or result (stdout); `end=False` leaves the line open."""

    def err(self, lines: list[str]) -> None:
        """Lines of error (stderr)."""

    def count(self, what: str, done: int, total: int) -> None:
        """How far a fleet-wide stage got: `done` of `total` hosts (a bar on a terminal)."""


class Silent:
    """An Output that drops everything."""

    def out(self, text: str, end: bool = True) -> None:
        pass

    def err(self, lines: list[str]) -> None:
        pass

    def count(self, what: str, done: int, total: int) -> None:
        pass


@dataclass(frozen=True)
class RunOptions:
    runs: Path
    quiet: bool = False
    accept_new_host_keys: bool = False
    keep_daemons: bool = False
    output: Output = field(default_factory=Silent)
    merge: bool = True  # False: the run leaves its streams unmerged (`ns_control fetch` merges them)
    share_hosts: bool = False  # run on hosts another run is using (a daemon refuses it otherwise)


async def _run(run: Run) -> None:
    loop = asyncio.get_running_loop()

    def interrupt() -> None:
        run.interrupt()
        # A second Ctrl-C falls through to Python's default and ends the controller.
        loop.remove_signal_handler(signal.SIGINT)

    loop.add_signal_handler(signal.SIGINT, interrupt)
    loop.add_signal_handler(signal.SIGTERM, run.interrupt)
    await run.execute()


def run_plan(plan: Plan, options: RunOptions, record: dict[str, Any] | None = None,
             created: Callable[[RunDir], None] | None = None,
             said: set[str] | None = None) -> tuple[RunDir, RunOutcome]:
    """Run `plan` into a new run directory under options.runs, with `record` (fields of its
    RunRecord: a campaign's point, what it is a rerun of) in its run.json; `created` is told
    the directory before anything starts. The plan's warnings are said unless in `said` (a
    campaign's, which says each once for all its runs), and added to it; run.json keeps
    them all. Returns the directory and how the run went (its `exit_code` is what
    ns_control ends with)."""
    started = time.monotonic()
    key = load_or_create_key()
    rundir = RunDir.create(
        options.runs, plan.name, plan.text, experiment_sha256=plan.sha256, plan=plan.resolved(),
        versions={"netspec": netspec_version(), "python": sys.version.split()[0]},
        merge=None if options.merge else NOT_MERGED, share_hosts=options.share_hosts, **(record or {}))
    rundir.keep_programs([c.program for c in plan.components if c.program] + plan.filter_files())
    if created is not None:
        created(rundir)
    output = options.output
    said = set() if said is None else said
    output.err([f"warning: {w}" for w in plan.warnings if w not in said])
    said.update(plan.warnings)
    if not options.quiet:
        output.out(f"netspec: running {plan.name} as {rundir.id}")

    live = summary.LiveLine()

    def progress(event: Progress) -> None:
        if event.kind == "count":
            output.count(event.step, event.done, event.total)
        else:
            output.out(*live.text(event))

    def took() -> str:
        return summary.wall_line(time.monotonic() - started, rundir.record.duration_s, merged.seconds)

    run = Run(plan, rundir, key, (lambda e: None) if options.quiet else progress,
              accept_new_host_keys=options.accept_new_host_keys, keep_daemons=options.keep_daemons,
              share_hosts=options.share_hosts)
    try:
        asyncio.run(_run(run))
    except KeyboardInterrupt:
        outcome = RunOutcome.interrupted_twice(run.phase)
        rundir.finish(outcome)
        output.err(["", "interrupted twice: stopped without gathering; daemons end their runs "
                    f"by themselves. Run directory: {rundir.path}"])
        return rundir, outcome
    except NetspecError as exc:
        if not options.quiet:
            output.out("")  # end the progress line before the error goes to stderr
        output.err(summary.error_lines(exc))
        merged = _merge_at_end(rundir.path, options, plan)
        output.err([*summary.after_failure(merged.lines), took(),
                    f"run directory (everything gathered so far): {rundir.path}"])
        outcome = RunOutcome.of(rundir.record)
        if outcome.status == RunStatus.RUNNING:  # the run's own end failed before it saved its outcome
            outcome = RunOutcome.ended(exc, run.phase, [], [])
            rundir.finish(outcome)
        return rundir, outcome
    if not options.quiet:
        for line in summary.run_lines(rundir.path, rundir.record):
            output.out(line)
    # The run went well even if its merge did not: that is said, and `fetch` tries again.
    merged = _merge_at_end(rundir.path, options, plan)
    if not options.quiet:
        for line in merged.lines:
            output.out(line)
        output.out(took())
    outcome = RunOutcome.of(rundir.record)
    if outcome.status == RunStatus.PARTIAL and outcome.error is not None:
        output.err([f"partial: {outcome.error.message}:", *(f"  {t}" for t in outcome.error.causes)])
    return rundir, outcome


NOT_MERGED = "not merged, as asked (--no-merge)"


@dataclass(frozen=True)
class Merged:
    """What a merge made, in lines for people; `ok` is False when it failed."""

    ok: bool
    lines: list[str]
    seconds: float = 0.0
    files: list[str] = field(default_factory=list)  # what it wrote, relative to the result set's directory


def _merge_at_end(run: Path, options: RunOptions, plan: Plan) -> Merged:
    """The merge a run ends with, or what it says when --no-merge asked for none. The user's
    own decoders and filters the experiment file names run: the user is running that file."""
    if not options.merge:
        return Merged(True, [f"{NOT_MERGED}: `ns_control fetch RUN` merges it"])
    return merge(run, options.output, code=plan_code(plan))


def plan_code(plan: Plan) -> UserCode:
    """The user's own decoders and filters an experiment file names, for the merges of the
    file the user runs (a run it ends with, a campaign's resumed run): never a record's."""
    return UserCode(plan.decoders, tuple(spec["filter"] for spec in plan.graph.values() if user_filter(spec)),
                    plan.path.parent)


class MergeInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a merge, once said and noted in run.json: it goes on up as
    the KeyboardInterrupt it is (ns_control ends with 130, a campaign stops for `resume`,
    which merges again), never as a traceback."""


def merge(run: Path, output: Output, out: Path | None = None, code: UserCode = NONE) -> Merged:
    """Merge a run's streams, gathered in full or not; the run's own files stay as they are
    whatever happens here. A failure is said on `output` at once; what the merge made is
    returned for the caller to show or not. Only the user's own decoders and filters in
    `code` run (resultset.merge_run).

    Raises:
        MergeInterrupted: Ctrl-C or SIGTERM during the merge: said on `output` with how to
            merge again, the half-made result set marked not current, run.json noting it.
    """
    try:
        with _terminate_interrupts():
            merged = _merge(run, output, out, code)
    except (KeyboardInterrupt, RuntimeError) as exc:
        if not _interrupted(exc):
            raise
        with _interrupts_ignored():  # a second Ctrl-C does not cut the note short
            lines = ["", f"merge interrupted: the run and its streams are as they were, its result set "
                     f"is incomplete; `ns_control fetch {run.name}` merges again"]
            try:
                (out or run / MERGED).joinpath("summary.json").unlink(missing_ok=True)
                if out is None:
                    note_merge(run, MERGE_INTERRUPTED)
            except (OSError, NetspecError) as exc:
                lines.append(f"(the half-made result set is not marked, nor run.json noted: {exc})")
            output.err(lines)
        raise MergeInterrupted from None
    if merged.ok and out is None:
        note_merge(run, None)  # merged now, whatever an earlier merge or --no-merge left said
    return merged


# run.json's "merge" after an interrupted merge (NOT_MERGED after --no-merge; none once merged).
MERGE_INTERRUPTED = ("interrupted (Ctrl-C or SIGTERM): the result set is incomplete; "
                     "`ns_control fetch` merges again")


def _interrupted(exc: BaseException) -> bool:
    """Whether `exc` is Ctrl-C: Python's KeyboardInterrupt, or DuckDB's own error for one
    that landed in a query (it takes SIGINT while a query runs, to stop it: a
    RuntimeError 'Query interrupted' in DuckDB 2, an InterruptException before)."""
    import duckdb

    return isinstance(exc, KeyboardInterrupt | duckdb.InterruptException) or (
        type(exc) is RuntimeError and str(exc) == "Query interrupted")


@contextlib.contextmanager
def _terminate_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt while the block runs, as Ctrl-C does (the merge
    runs in the main thread, outside the run's event loop and its handlers)."""
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _interrupts_ignored() -> Iterator[None]:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])


def _merge(run: Path, output: Output, out: Path | None, code: UserCode) -> Merged:
    started = time.monotonic()
    # The merge's libraries load here, not with ns_control: a run with --no-merge, and every
    # command that merges nothing, starts without them.
    import duckdb
    from netspec.analysis.resultset import add_files, merge_run
    from netspec.web.report import write_report

    try:
        result = merge_run(run, out, code)
    except (OSError, ValueError, NetspecError, duckdb.Error) as exc:
        if _interrupted(exc):
            raise
        output.err([f"merge failed: {exc} (the streams are untouched; `ns_control fetch` tries again)"])
        return Merged(False, [], time.monotonic() - started)
    took = time.monotonic() - started
    lines = summary.merge_lines(result, took)
    try:
        report = write_report(run, out)
        add_files(result, [report])
        lines.append(f"  report (opens in any browser, no network): {report}")
    except Exception as exc:  # a page for people: whatever breaks it, the run and its result set stand
        if _interrupted(exc):
            raise
        output.err([f"report.html not written: {type(exc).__name__}: {exc} (the result set is complete)"])
    return Merged(True, lines, took, result.files)
