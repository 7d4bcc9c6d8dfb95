"""A run or a campaign opened from Python: a run's record, its outcome, its steps and
participants, and its result set's tables (DuckDB, Arrow; pandas or polars where installed).

    from netspec import results

    run = results.open_run("latest")          # a path, 'latest', or (a suffix of) a run id
    print(run.outcome.status, [s.phase for s in run.steps])  # run.record: run.json, typed
    for host, name, entry in run.steps[0].participants():
        print(host, name, results.decide(entry))  # an Outcome, as show and the browser say it
    with run.tables() as t:                   # every Parquet table of RUN/merged/, by name
        t.sql("SELECT median(duration_ns) FROM intervals WHERE name = 'STIM/rtt'").fetchall()
        t.operations()                        # each phase's operations: failures by cause, ...

Runs are looked up under a runs directory, ./runs by default as for ns_control; campaigns
under its campaigns/. Nothing here changes a run, but for what `ns_control show` does too: a
run whose controller on this machine is gone while it says `running` is marked interrupted.
docs/api.md describes it; docs/results.md describes the tables' columns.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from netspec.analysis.faults import Recovery, recoveries
from netspec.analysis.histograms import MergedHistogram, merged_histograms
from netspec.analysis.operations import OperationFigures
from netspec.analysis.packetsplit import Split, splits
from netspec.analysis.phases import SPANS_SQL, phase_operations
from netspec.analysis.resultset import SUMMARY, is_current, open_tables, read_summary
from netspec.controller.campaigns.campaign import find_campaign
from netspec.controller.experiment.campaignfile import CAMPAIGNS
from netspec.controller.record.rundir import find_run, settle
from netspec.protocol.campaignrecord import CAMPAIGN_FILE, CampaignRecord, CampaignRun, Point, read_campaign
from netspec.protocol.errors import NetspecError
from netspec.protocol.outcome import Outcome, decide
from netspec.protocol.runoutcome import RunOutcome
from netspec.protocol.runrecord import MERGED, RunError, RunRecord, RunStatus, read_run
from netspec.protocol.runstep import Entry, Step

__all__ = ["Campaign", "CampaignRecord", "CampaignRun", "Entry", "MergedHistogram", "NetspecError",
           "OperationFigures", "Outcome", "Participant", "Point", "Recovery", "Run", "RunError", "RunOutcome",
           "RunRecord", "RunStatus", "Split", "Step", "Tables", "decide", "open_campaign", "open_run"]

RUNS = Path("runs")
"""The runs directory ns_control uses unless told otherwise (--runs): ./runs."""


def _record(path: Path) -> RunRecord:
    """The only read of a run's record here: run.json with its journals, settled as `show`
    settles it."""
    return settle(path, read_run(path))


@dataclass(frozen=True)
class Participant:
    """A component of the run on its host, and how its process ended.

    Attributes:
        host: the host's name in the experiment file.
        component: the component's name (a group's member: COMPONENT-HOST).
        returncode: its exit status (negative: the signal that ended it); None where its end
            is not known (a lost host, a run still going).
        duration_s: how long its process ran, in seconds; None where not known.
    """

    host: str
    component: str
    returncode: int | None  # None: its end is not known (a lost host, a run still going)
    duration_s: float | None


class Tables:
    """A run's result set (RUN/merged/): a DuckDB connection with a view on each Parquet
    table, named as its file (events, intervals, samples, phases, clock, ..., and what the
    experiment's analysis graph wrote). Close it, or use it as a context manager: the
    connection is this object's, and closing it twice is harmless.

    Attributes:
        directory: the result set's directory.
        names: every table's name, sorted.
        warnings: what the merge said of it (records dropped or kept raw, pairs that matched
            nothing, clocks without a fit...), as `ns_control fetch` printed them.
        db: the DuckDB connection (a view per table; query it as you like).
    """

    def __init__(self, directory: Path):
        self.directory = directory
        self.names = tuple(sorted(p.stem for p in directory.glob("*.parquet")))
        summary = read_summary(directory)
        if summary is None:
            raise NetspecError(f"{directory}/{SUMMARY}: missing, or not a result set's summary")
        self.warnings = tuple(summary.warnings)
        self.db: duckdb.DuckDBPyConnection = open_tables(directory)

    def operations(self) -> tuple[OperationFigures, ...]:
        """Each step's operations (nodelib.operation), per component and operation name, as
        `ns_control report` gives them: `count`, `ok`, `rate_per_s`, `failures` by (outcome,
        cause, count), `ok_latency` and `failed_latency` apart (count, p50_ns, p99_ns, max_ns),
        `no_success_ns` (the longest time without a success), `failed_in_a_row`, and the
        pacer's lag (`lag_p99_ns`, `lag_max_ns`, `late`). The rows: the `operations` table."""
        return tuple(phase_operations(self.db))

    def recoveries(self) -> tuple[Recovery, ...]:
        """Each fault of the schedule against the operations, as `ns_control report` gives
        them: `recovery_ns`, from when it was done to the first success of an operation asked
        after it, and `recovery_after_end_ns`, from its end (`end_ns`, the fault `ended_by`
        where another ended it); None where there was none. Empty without faults or
        operations. The rows: the `faults` table."""
        return tuple(recoveries(self.db))

    def histograms(self) -> tuple[MergedHistogram, ...]:
        """Each step's log histograms (nodelib.histogram with `relative_error`), every host's
        records merged exactly: `count`, `quantile(q)` (a `Quantile`: `value` within
        `relative_error`, or `below` / `above` the bins' range), `sources`, `scale`."""
        return tuple(merged_histograms(self.db, SPANS_SQL)) if "events" in self.names else ()

    def splits(self) -> tuple[Split, ...]:
        """Each pair's interval split by the packets that carried it, per phase, as `ns_control
        report` gives it (`services: packets:`): the medians of the interval (`user_ns`) and of
        its parts, `sender_ns` (its start to its packet's send), `network_ns` (the packet's
        kernel-to-kernel delay) and `receiver_ns` (its arrival to the end). Empty without
        packets. The rows: the `intervals` and `packets` tables."""
        return tuple(splits(self.db))

    def sql(self, query: str, params: Any = None) -> duckdb.DuckDBPyRelation:
        """`query` on the tables, as a DuckDB relation (`.fetchall()`, `.arrow()`, `.pl()`...)."""
        return self.db.sql(query, params=params)

    def arrow(self, name: str) -> pa.Table:
        """Table `name` whole, read by pyarrow.

        Raises:
            NetspecError: the result set has no table `name` (the message lists those it has).
        """
        if name not in self.names:
            raise NetspecError(f"{self.directory}: no table '{name}' (it has: {', '.join(self.names)})")
        return pq.read_table(self.directory / f"{name}.parquet")

    def pandas(self, name: str) -> Any:
        """Table `name` as a pandas DataFrame.

        Raises:
            NetspecError: pandas is not installed, or there is no table `name`.
        """
        _optional("pandas")
        return self.arrow(name).to_pandas()

    def polars(self, name: str) -> Any:
        """Table `name` as a polars DataFrame.

        Raises:
            NetspecError: polars is not installed, or there is no table `name`.
        """
        return _optional("polars").from_arrow(self.arrow(name))

    def close(self) -> None:
        """Close the DuckDB connection (again: harmless)."""
        self.db.close()

    def __enter__(self) -> Tables:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _optional(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise NetspecError(f"{module} is not installed (netspec does not depend on it): "
                           f"`pip install {module}`, or read the table as Arrow (Tables.arrow)") from exc


class _Opened:
    """What a run and a campaign both give of their record: its id and its experiment's name."""

    record: RunRecord | CampaignRecord

    @property
    def id(self) -> str:
        """The run's or campaign's id (its directory's name)."""
        return self.record.id

    @property
    def experiment(self) -> str:
        """The experiment's name (`experiment:` in its file)."""
        return self.record.experiment


@dataclass(frozen=True)
class Run(_Opened):
    """A run directory and its record (run.json, typed: protocol/runrecord.py), as it was when
    opened: open it again for news.

    Attributes:
        path: the run directory.
        record: run.json, with its journals folded in (a `RunRecord`).
        id: the run's id (`RUNS/EXPERIMENT/ID`'s last part).
        experiment: the experiment's name.
    """

    path: Path
    record: RunRecord = field(repr=False)

    @property
    def outcome(self) -> RunOutcome:
        """How the run went: `status`, `ok`, `exit_code` (what ns_control ends with for it),
        and `error` (why it is not ok: its message, phase and causes)."""
        return RunOutcome.of(self.record)

    @property
    def steps(self) -> tuple[Step, ...]:
        """Each step as it ran: its phase, status, duration, and each host's entries
        (`Step.participants()`: every host, component and its Entry, acked or not)."""
        return tuple(self.record.steps)

    @property
    def participants(self) -> tuple[Participant, ...]:
        """Each component of the experiment on its host, and how its process ended."""
        ended = self.record.components
        return tuple(Participant(c.host, c.name, *(
            (e.returncode, e.duration_s) if (e := ended.get(f"{c.host}/{c.name}")) else (None, None)))
            for c in (self.record.plan.components if self.record.plan else []))

    def tables(self) -> Tables:
        """The run's result set, its tables registered by name in a DuckDB connection.

        Raises:
            NetspecError: the run has no result set of this netspec's format (still running,
                never merged, its merge failed or was interrupted, or made by an older
                netspec): the message says why, and that `ns_control fetch RUN` merges it.
        """
        merged = self.path / MERGED
        if self.outcome.running:
            raise NetspecError(f"run {self.id} is still running: its result set is made at its end "
                               "(open the run again then)")
        if not is_current(merged):
            why = self.record.merge or (
                "its result set is of another netspec's format" if merged.is_dir() else "it was not merged")
            raise NetspecError(f"run {self.id} has no result set: {why}; `ns_control fetch {self.id}` "
                               "merges it")
        return Tables(merged)


def open_run(ref: str | Path = "latest", runs: str | Path = RUNS) -> Run:
    """The run `ref`: a run directory's path, 'latest', or (a unique suffix of) a run id
    under `runs`.

    Raises:
        NetspecError: no such run (the message names `ref` and where it was looked for), or
            a directory that holds no run, or a run.json that cannot be read.
    """
    if Path(ref).is_dir() and not (Path(ref) / "run.json").is_file():
        raise NetspecError(f"{ref}: not a run directory (no run.json in it)")
    path = find_run(Path(runs), str(ref))
    return Run(path, _record(path))


@dataclass(frozen=True)
class Campaign(_Opened):
    """A campaign directory and its record (campaign.json, typed: protocol/campaignrecord.py),
    as it was when opened: its `points` (each with its params, label, why it is done and its
    runs as the campaign counted them) and its runs.

    Attributes:
        path: the campaign directory.
        record: campaign.json (a `CampaignRecord`).
        id: the campaign's id.
        experiment: the experiment's name.
    """

    path: Path
    record: CampaignRecord = field(repr=False)

    @property
    def status(self) -> str:
        """running, done, failed or interrupted."""
        return self.record.status

    @property
    def points(self) -> tuple[Point, ...]:
        """Each point of the sweep: its `params`, `label`, `done` (why it is done, or None)
        and `runs` (each a `CampaignRun`: id, path, status, value, counted, warmup)."""
        return tuple(self.record.points)

    def runs(self) -> tuple[Run, ...]:
        """Every run of every point that has a directory (a run whose setup hook failed has
        none), opened, in the order they ran.

        Raises:
            NetspecError: a run's directory is gone or its record unreadable, naming it.
        """
        return tuple(open_run(r.path) for p in self.record.points for r in p.runs if r.path is not None)


def open_campaign(ref: str | Path, runs: str | Path = RUNS, campaigns: str | Path | None = None) -> Campaign:
    """The campaign `ref`: its directory's path, or (a unique suffix of) its id under
    `campaigns` (RUNS/campaigns by default, as for ns_control).

    Raises:
        NetspecError: no such campaign, or more than one, or a directory that holds none, or
            a campaign.json that cannot be read (naming the file and the key).
    """
    if Path(ref).is_dir() and not (Path(ref) / CAMPAIGN_FILE).is_file():
        raise NetspecError(f"{ref}: not a campaign directory (no {CAMPAIGN_FILE} in it)")
    root = Path(campaigns) if campaigns is not None else Path(runs) / CAMPAIGNS
    path = find_campaign(root, str(ref))
    return Campaign(path, read_campaign(path))
