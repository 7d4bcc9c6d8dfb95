"""Campaigns (Auto-pilot's FOREACH/FOR, TEST with a stop predicate, SETUP/CLEANUP, FASTFAIL
and CHECKPOINT): every point of an experiment file's sweep is run at least `repeat.runs`
times, then until `repeat.until` holds on the metric's statistics across its runs, at most
`repeat.max` times.

RUNS/campaigns/<experiment>/<id>/campaign.json is the checkpoint (protocol/campaignrecord.py):
the points, every run's directory and outcome, and the run under way; it is rewritten after
every step, so that a campaign killed at any moment resumes (`ns_control resume`) with the run
it lost.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from netspec.analysis.metrics import Metric, run_metrics
from netspec.analysis.points import STATISTICS, UnlikeRuns, point_metrics
from netspec.analysis.predicate import holds
from netspec.analysis.provenance import differences
from netspec.analysis.provenance import load as provenance
from netspec.analysis.resultset import MERGED, is_current, read_summary
from netspec.protocol.campaignrecord import (
    CAMPAIGN_FILE,
    SETUP_FAILED,
    CampaignRecord,
    CampaignRun,
    Current,
    Point,
    read_campaign,
    write_campaign,
)
from netspec.protocol.errors import NetspecError
from netspec.protocol.runoutcome import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_PARTIAL, RunOutcome
from netspec.protocol.runrecord import CampaignPoint, RunStatus

from ..engine.runner import RunOptions, merge, plan_code, run_plan
from ..experiment.campaignfile import point_label
from ..experiment.links import link_setting, mbit, milliseconds, percent
from ..experiment.load import parse
from ..experiment.model import Campaign, Plan
from ..record.rundir import RunDir
from .hooks import HookFailed, run_hook

HOOKS_LOG = "hooks.log"

class CampaignError(NetspecError):
    """A campaign cannot go on: a metric that no run has, a missing directory."""


class CampaignDir:
    """The campaign's directory and its checkpoint."""

    def __init__(self, path: Path, record: CampaignRecord):
        self.path, self.record = path, record

    @classmethod
    def create(cls, root: Path, plan: Plan) -> CampaignDir:
        assert plan.campaign is not None
        now = time.time_ns()
        cid = f"{datetime.fromtimestamp(now / 1e9, UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
        path = root / plan.name / cid
        path.mkdir(parents=True)
        record = CampaignRecord(id=cid, experiment=plan.name, file=str(plan.path), text=plan.text,
                                sha256=plan.sha256, status=RunStatus.RUNNING, started_ns=now,
                                points=[Point(params=p, label=point_label(p)) for p in plan.campaign.points])
        campaign = cls(path, record)
        campaign.save()
        return campaign

    @classmethod
    def open(cls, path: Path) -> CampaignDir:
        try:
            return cls(path, read_campaign(path))
        except NetspecError as exc:
            raise CampaignError(f"not a campaign: {exc}") from None

    @property
    def plan(self) -> Plan:
        return parse(self.record.text, Path(self.record.file))

    def save(self) -> None:
        write_campaign(self.path, self.record)


def find_campaign(root: Path, ref: str) -> Path:
    """A campaign by path, or by (a unique suffix of) its id under `root`."""
    if (Path(ref) / CAMPAIGN_FILE).is_file():
        return Path(ref).resolve()
    matches = [p.parent for p in root.glob(f"*/*/{CAMPAIGN_FILE}") if p.parent.name.endswith(ref)]
    if len(matches) != 1:
        raise CampaignError(f"{'no' if not matches else len(matches)} campaign(s) '{ref}' under {root}")
    return matches[0]


def run_value(run: Path, metric: str | None, statistic: str) -> float | None:
    """The one number a run gives its point: `statistic` of `metric`'s samples in it."""
    if metric is None:
        return None
    metrics = run_metrics(run / MERGED)
    if metric not in metrics:
        raise CampaignError(f"run {run.name} has no metric '{metric}' (it has: {', '.join(metrics)})")
    return float(STATISTICS[statistic](metrics[metric].values))


def _decide(point: Point, c: Campaign) -> str | None:
    """Why the point is done (runs, until, max, failures), or None if it needs another run.

    A point is run at most `max` times (`runs` when no max is given), plus its warm-up runs;
    a failed run spends one of them as a counted run does (an interrupted one does not: it is
    run again). A point whose runs are spent before `runs` of them counted is done with
    "failures": it failed, and so does its campaign."""
    spent = [r for r in point.runs if not _outcome(r).interrupted]
    counted = [r.value for r in spent if r.counted]
    limit = c.max_runs or c.runs
    exhausted = len(spent) >= limit + c.warmup
    if len(counted) < c.runs:
        return "failures" if exhausted else None
    if c.until is None:
        return "runs"
    from netspec.analysis.stats import summarize  # scipy: only for a stop predicate

    if holds(c.until, asdict(summarize(np.array(counted)))):
        return "until"
    return "max" if len(counted) >= limit or exhausted else None


def _outcome(run: CampaignRun) -> RunOutcome:
    """A point's run's outcome as the campaign recorded it (its status: RunOutcome's, or
    SETUP_FAILED, which counts as failed)."""
    return RunOutcome(run.status)


def failed_points(points: list[Point], c: Campaign) -> list[str]:
    """Each point that was done without its counted runs, as "LABEL (N of M counted, K of L
    run(s) failed, P partial, J ok but not counted)": a partial run apart from the failed ones,
    counted only with `count_partial`; a run that went well is not counted when it was a
    warm-up, unlike the point's first run (provenance) or, with refuse_starved, starved of CPU."""
    lines = []
    for p in points:
        if p.done != "failures":
            continue
        partial = sum(r.status == RunStatus.PARTIAL for r in p.runs)
        failed = sum(_outcome(r).counts_as_failed for r in p.runs) - partial
        uncounted = sum(_outcome(r).ok and not r.counted for r in p.runs)
        partly = ""
        if partial:
            partly = f", {partial} partial" + ("" if c.count_partial else
                                               ": not counted (repeat: count_partial is false)")
        lines.append(f"{p.label} ({sum(r.counted for r in p.runs)} of {c.runs} counted, "
                     f"{failed} of {len(p.runs)} run(s) failed{partly}"
                     + (f", {uncounted} ok but not counted: a warm-up, unlike the point's first run, "
                        "or starved of CPU (refuse_starved)" if uncounted else "") + ")")
    return lines


class Campaigner:
    """Runs a campaign's points from its checkpoint to the end."""

    def __init__(self, cdir: CampaignDir, options: RunOptions):
        self.cdir, self.options = cdir, options
        self.plan = cdir.plan
        assert self.plan.campaign is not None
        self.c: Campaign = self.plan.campaign
        self.said: set[str] = set()  # the file's warnings said so far: each once a campaign

    def _hooks(self, stage: str, env: dict[str, str]) -> None:
        for hook in self.c.hooks.get(stage, ()):
            run_hook(hook, stage, self.plan, {"NETSPEC_CAMPAIGN": self.cdir.record.id, **env},
                     self.cdir.path / HOOKS_LOG, self.options.accept_new_host_keys)

    def run(self) -> int:
        state = self.cdir.record
        state.status = "running"
        self.cdir.save()
        try:
            if not state.presetup_done:
                self._hooks("presetup", {})
                state.presetup_done = True
                self.cdir.save()
            self._recover()
            for point in state.points:
                while point.done is None:
                    code = self._one_run(point)
                    if code == EXIT_INTERRUPTED:
                        return self._end("interrupted", EXIT_INTERRUPTED, "interrupted: `ns_control resume "
                                         f"{self.cdir.path}` goes on from here")
                    went_well = (EXIT_OK, EXIT_PARTIAL) if self.c.count_partial else (EXIT_OK,)
                    if code not in went_well and self.c.fastfail:
                        return self._fail(f"fastfail: a run of {point.label} failed")
                    point.done = _decide(point, self.c)
                    self.cdir.save()
            if not state.postcleanup_done:  # once: a failed campaign resumed is only said again
                self._hooks("postcleanup", {})
                state.postcleanup_done = True
                self.cdir.save()
            failed = failed_points(state.points, self.c)
            if failed:
                return self._fail(f"{len(failed)} of {len(state.points)} point(s) failed: "
                                  + "; ".join(failed))
        except (HookFailed, CampaignError) as exc:
            return self._fail(str(exc))
        except KeyboardInterrupt:
            return self._end("interrupted", EXIT_INTERRUPTED, "interrupted: `ns_control resume "
                             f"{self.cdir.path}` goes on from here")
        return self._end("done", EXIT_OK, f"campaign {state.id}: done, {self._counts()}")

    def _one_run(self, point: Point) -> int:
        state = self.cdir.record
        index = state.points.index(point)
        env = {"NETSPEC_POINT": json.dumps(point.params), "NETSPEC_REPETITION": str(len(point.runs))}
        current = state.current = Current(index)
        self.cdir.save()
        try:
            self._hooks("setup", env)
        except HookFailed as exc:
            self.options.output.err([f"error: {exc}"])
            point.runs.append(CampaignRun(id=None, path=None, status=SETUP_FAILED))
            state.current = None
            self.cdir.save()
            return EXIT_FAILED

        def created(rundir: RunDir) -> None:
            current.run = str(rundir.path.resolve())
            self.cdir.save()

        # The campaign file with the point's values: its warnings cite the campaign file's lines.
        plan = parse(state.text, Path(state.file), point=point.params)
        self.options.output.out(f"campaign {state.id}: {point.label}, run {len(point.runs) + 1}")
        rundir, outcome = run_plan(plan, self.options, {"campaign": CampaignPoint(
            state.id, point.params, len(point.runs))}, created, self.said)
        try:
            self._hooks("cleanup", env)
        finally:
            self._record(point, rundir.path, outcome)
        return outcome.exit_code

    def _record(self, point: Point, path: Path, outcome: RunOutcome) -> None:
        ok = outcome.ok or (self.c.count_partial and outcome.status == RunStatus.PARTIAL)
        if outcome.status == RunStatus.PARTIAL:
            self.options.output.err([f"warning: {path.name} is partial: " + (
                "counted (repeat: count_partial), its metric what it measured" if self.c.count_partial else
                "not counted (repeat: count_partial is false); it spends one of the point's runs")])
        value = run_value(path, self.c.metric, self.c.statistic) if ok else None
        warm = sum(_outcome(r).ok for r in point.runs) < self.c.warmup
        counted = ok and not warm
        first = next((r for r in point.runs if r.counted), None)
        diffs = (differences(provenance(Path(first.path)), provenance(path))
                 if counted and first and first.path else [])
        if diffs:
            counted = False
            self.options.output.err([f"warning: {path.name} is not counted as a repetition of "
                                     f"{point.label}: it differs from run {first.id}: "
                                     + "; ".join(diffs)])
        summary = read_summary(path / MERGED) if ok else None
        starved = [s.text() for s in summary.starved] if summary else []
        if starved and counted and self.c.refuse_starved:
            counted = False
            self.options.output.err([f"warning: {path.name} is not counted as a repetition of "
                                     f"{point.label} (refuse_starved): " + "; ".join(starved)])
        point.runs.append(CampaignRun(id=path.name, path=str(path.resolve()), status=outcome.status,
                                      value=value, counted=counted, warmup=warm, differs=diffs,
                                      starved=starved))
        self.cdir.record.current = None
        self.cdir.save()

    def _recover(self) -> None:
        """The run the last controller lost: kept if it ended, marked interrupted if not."""
        current = self.cdir.record.current
        if current is None:
            return
        point = self.cdir.record.points[current.point]
        path = Path(current.run) if current.run else None
        if path is None or not (path / "run.json").is_file():
            self.cdir.record.current = None
            self.cdir.save()
            return
        run = RunDir.open(path)
        if RunOutcome.unfinished(run.record):  # its controller (the last campaign's) was killed
            outcome = RunOutcome.run_again()
            run.finish(outcome)
        else:
            outcome = RunOutcome.of(run.record)
            if not is_current(path / MERGED):
                merge(path, self.options.output, code=plan_code(self.plan))
        self._record(point, path, outcome)
        point.done = _decide(point, self.c)
        self.cdir.save()

    def _counts(self) -> str:
        runs = self.cdir.record.runs()
        counted = sum(r.counted for r in runs)
        return f"{len(self.cdir.record.points)} point(s), {counted} counted runs of {len(runs)}"

    def _fail(self, why: str) -> int:
        if self.c.notify is not None:
            try:
                run_hook(self.c.notify, "notify", self.plan, {"NETSPEC_CAMPAIGN": self.cdir.record.id,
                                                               "NETSPEC_FAILURE": why},
                         self.cdir.path / HOOKS_LOG, self.options.accept_new_host_keys)
            except HookFailed as exc:
                self.options.output.err([f"error: {exc}"])
        return self._end("failed", EXIT_FAILED, f"campaign {self.cdir.record.id}: stopped: {why}")

    def _end(self, status: str, code: int, text: str) -> int:
        self.cdir.record.status = status
        self.cdir.save()
        lines = [text, f"campaign directory: {self.cdir.path}"]
        if code:
            self.options.output.err(lines)
        else:
            for line in lines:
                self.options.output.out(line)
        return code


def campaign_metrics(cdir: CampaignDir) -> dict[str, dict[str, Metric]]:
    """Per point (by label), every metric as one value per counted run: the campaign's
    statistic of the metric's samples in that run.

    Raises:
        CampaignError: the counted runs of a point are not repetitions of one experiment.
    """
    campaign = cdir.plan.campaign
    try:
        return point_metrics(cdir.record.points, campaign.statistic if campaign else "median")
    except UnlikeRuns as exc:
        raise CampaignError(str(exc)) from None


def starved_lines(cdir: CampaignDir) -> list[str]:
    """A line for each run of the campaign that its merge found starved of CPU: counted (the
    campaign counts such runs) or not (refuse_starved)."""
    return [f"{p.label}: run {r.id} {'counted' if r.counted else 'not counted'}, starved of CPU: {text}"
            for p in cdir.record.points for r in p.runs for text in r.starved]


def swept_axis(cdir: CampaignDir) -> tuple[str, str, dict[str, float]] | None:
    """The campaign's one swept parameter as numbers: its key, its unit, and each point's
    value by label. A number is itself (no unit); a link's delay or jitter (`50ms`) is in ms,
    its loss (`1%`) in %, its rate (`10mbit`) in Mbit/s. None: several parameters, or one
    whose values are not all such."""
    keys = {k for p in cdir.record.points for k in p.params}
    if len(keys) != 1:
        return None
    (axis,) = keys
    values = [p.params.get(axis) for p in cdir.record.points]
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return axis, "", {p.label: float(v) for p, v in zip(cdir.record.points, values, strict=True)}
    setting = link_setting(axis)
    read = {"delay": (milliseconds, "ms"), "jitter": (milliseconds, "ms"), "loss": (percent, "%"),
            "rate": (mbit, "Mbit/s")}.get(setting[1]) if setting else None
    if read is None or not all(isinstance(v, str) for v in values):
        return None
    try:
        return axis, read[1], {p.label: read[0](v) for p, v in zip(cdir.record.points, values, strict=True)}
    except (AttributeError, ValueError):  # a value of another shape: the schema refused it at check
        return None


def sweep_fit_lines(cdir: CampaignDir, points: dict[str, dict[str, Metric]]) -> list[str]:
    """Each metric against the one swept parameter, where it is numeric (analysis/sweepfit.py)."""
    from netspec.analysis.sweepfit import fit_lines, fits

    swept = swept_axis(cdir)
    if swept is None:
        return []
    axis, unit, values = swept
    return fit_lines(axis, unit, fits(values, points))


def plot_points(cdir: CampaignDir, points: dict[str, dict[str, Metric]]) -> list[Path]:
    """Each metric's bars (and line, over a single numeric parameter) into the campaign's plots/."""
    from netspec.analysis.plots import plot_campaign  # matplotlib and scipy: only for a report

    (cdir.path / "plots").mkdir(exist_ok=True)
    swept = swept_axis(cdir)
    axis = "" if swept is None else swept[0] + (f" ({swept[1]})" if swept[1] else "")
    written = []
    for metric in dict.fromkeys(m for ms in points.values() for m in ms):
        labels = [label for label, ms in points.items() if metric in ms]
        rows = [points[label][metric].summary() for label in labels]
        xs = [swept[2][label] for label in labels] if swept is not None else None
        unit = points[labels[0]][metric].unit
        written += plot_campaign(metric, unit, labels, *(np.array([getattr(r, f) for r in rows])
                                                         for f in ("mean", "low", "high")),
                                 cdir.path / "plots", xs, axis)
    return written
