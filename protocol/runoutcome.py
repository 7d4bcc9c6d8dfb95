"""A run's outcome, decided in one place: its status (ok, partial, failed, interrupted, or
still running) and the exit code `ns_control` ends with, as Invoke's `Result` carries `ok`
and `exited`. The engine decides it as a run ends (`RunOutcome.ended`), and every reader
(`ls`, `show`, the browser, a campaign) takes it from the record (`RunOutcome.of`), so that a
run whose controller was killed reads as interrupted everywhere alike."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import Interrupted, StepFailed, said_once
from .runrecord import RunError, RunRecord, RunStatus, controller_gone


@dataclass(frozen=True)
class ExitCode:
    """One exit code of `ns_control`: its number, its name and when a command ends with it
    (the manual's exit-codes page is this table)."""

    code: int
    name: str
    meaning: str


EXITS = (
    ExitCode(0, "ok", "The command did what it was asked. A run: every step got through with "
             "every participant, and every component ended cleanly (status ok); a campaign: "
             "every point done."),
    ExitCode(1, "failed", "A run failed (a step missed its deadline or a participant failed it, "
             "a host could not be reached, a component died mid-run), a campaign stopped "
             "(a point failed, a hook failed, fastfail), or a command could not do its work "
             "(a run or file not found, a merge or a fetch that did not complete, records lost "
             "in a dumped stream, a daemon `up` or `down` could not reach)."),
    ExitCode(2, "usage", "The experiment file has errors (`check` and `run` say every one, "
             "file:line: key: reason), or the command line is wrong (argparse's message)."),
    ExitCode(3, "partial", "The run got through every step, but a participant did not (a k-of-n "
             "step's straggler), a component did not end cleanly, a scheduled fault did not happen (its "
             "instant after the run's end, its target gone), or a host's daemon did not "
             "stop cleanly at the end (each said)."),
    ExitCode(130, "interrupted", "Ctrl-C: a run gathers and merges what it has (a second Ctrl-C "
             "stops it without gathering) and reads as interrupted, as does a run whose controller "
             "was killed; a campaign so stopped goes on with `ns_control resume`."),
    ExitCode(141, "pipe", "A command that only prints (`show`, `ls`, `report`, ...) whose "
             "reader closed its output (`ns_control show | head -1`): it ends there, quietly, as "
             "a Unix tool killed by SIGPIPE does (128 + 13). A command that runs something "
             "(`run`, `rerun`, `collect`, ...) never stops for it: it says so once on stderr, "
             "goes on to its end and exits as its run went."),
)
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PARTIAL, EXIT_INTERRUPTED, EXIT_PIPE = (e.code for e in EXITS)
STATUSES = tuple(RunStatus)
EXIT_CODES = {RunStatus.OK: EXIT_OK, RunStatus.PARTIAL: EXIT_PARTIAL, RunStatus.FAILED: EXIT_FAILED,
              RunStatus.INTERRUPTED: EXIT_INTERRUPTED, RunStatus.RUNNING: EXIT_OK}

NOT_GATHERED = "what the hosts held was not gathered (`ns_control collect` gathers it)"


@dataclass(frozen=True)
class RunOutcome:
    """How a run went: `status`, and `error` (why it is not ok: None for ok and running)."""

    status: str
    error: RunError | None = None

    @property
    def ok(self) -> bool:
        return self.status == RunStatus.OK

    @property
    def running(self) -> bool:
        """Whether the run is still going (its controller, on this machine, alive)."""
        return self.status == RunStatus.RUNNING

    @property
    def interrupted(self) -> bool:
        """Whether the run was stopped before its end (Ctrl-C, or its controller killed):
        not the experiment's fault; a campaign runs its point again."""
        return self.status == RunStatus.INTERRUPTED

    @property
    def counts_as_failed(self) -> bool:
        """Whether the run failed the experiment: failed, partial, or a status this netspec
        does not know (a campaign's `setup failed`), neither ok, interrupted nor running."""
        return self.exit_code not in (EXIT_OK, EXIT_INTERRUPTED)

    @property
    def exit_code(self) -> int:
        """What `ns_control run` ends with: 0 ok, 3 partial, 1 failed (or a status this
        netspec does not know), 130 interrupted."""
        return EXIT_CODES.get(self.status, EXIT_FAILED)

    @property
    def troubled(self) -> bool:
        """Whether there is something wrong to show: an error, or a partial or failed run."""
        return self.error is not None or self.status in (RunStatus.FAILED, RunStatus.PARTIAL)

    def stopped_in(self, record: RunRecord) -> str:
        """Where the run stopped, in a word, for `ls`: the phase its error names, else the
        last step it was in or "before the first step"; "none" for a partial run (it got
        through every step); "" for a run that did not stop."""
        if self.error is None:
            return ""
        if self.error.phase:
            return self.error.phase
        if self.status == RunStatus.PARTIAL:
            return "none"
        return record.steps[-1].phase if record.steps else "before the first step"

    @staticmethod
    def unfinished(record: RunRecord) -> bool:
        """Whether the record was never finished: it says running, its controller at it or
        killed (`of` tells which)."""
        return record.status == RunStatus.RUNNING

    @classmethod
    def of(cls, record: RunRecord) -> RunOutcome:
        """The outcome the record says; a run `running` whose controller on this machine is
        gone was interrupted, whatever the record still says (`gone` gives its error)."""
        if controller_gone(record):
            return cls.gone(record)
        return cls(record.status, record.error)  # a status this netspec does not know exits 1

    @classmethod
    def gone(cls, record: RunRecord) -> RunOutcome:
        """A run whose controller ended without finishing it: interrupted in the step it was in."""
        return cls(RunStatus.INTERRUPTED, RunError(
            "Interrupted", f"{controller_ended(record)}: {NOT_GATHERED}",
            record.steps[-1].phase if record.steps else None, gathered=False))

    @classmethod
    def ended(cls, error: BaseException | None, phase: str, troubles: list[str],
              unclean: list[tuple[str, str, str]], stops: list[str] = ()) -> RunOutcome:
        """How a run ends, decided once by the engine: `error` stopped it in `phase` (""
        before the first step); or it got through every step, partial if a participant did
        not (`troubles`, each said) or a component did not end cleanly (`unclean`, each
        (host, what it says but for the host's names, what it says), said once for the hosts
        alike: `said_once`) or a host's daemon did not stop as it should at the end
        (`stops`, each said, and among the causes of a failed run too)."""
        if error is None:
            if not (troubles or unclean or stops):
                return cls(RunStatus.OK)
            said = [f"{len(troubles)} participant(s) did not"] if troubles else []
            said += [f"{len(unclean)} component(s) did not end cleanly"] if unclean else []
            said += [f"{len(stops)} host(s) did not stop cleanly"] if stops else []
            return cls(RunStatus.PARTIAL, RunError("Partial",
                                                   f"every step got through, but {' and '.join(said)}",
                                                   None, [*troubles, *said_once(unclean), *stops]))
        stopped = isinstance(error, Interrupted | KeyboardInterrupt)
        status = RunStatus.INTERRUPTED if stopped else RunStatus.FAILED
        return cls(status, RunError(type(error).__name__, str(error), phase or None,
                                    [*(error.causes() if isinstance(error, StepFailed) else []), *stops]))

    @classmethod
    def run_again(cls) -> RunOutcome:
        """A campaign's run whose controller was killed, found still running by `resume`,
        which runs its point again."""
        return cls(RunStatus.INTERRUPTED, RunError(
            "Interrupted", "its controller was killed; the campaign resumed and runs it again"))

    @classmethod
    def interrupted_twice(cls, phase: str) -> RunOutcome:
        """A second Ctrl-C: the controller stops without gathering."""
        return cls(RunStatus.INTERRUPTED,
                   RunError("Interrupted", "interrupted twice: stopped without gathering", phase or None))


def controller_ended(record: RunRecord) -> str:
    return f"its controller (pid {record.controller.pid}) ended without finishing the run"
