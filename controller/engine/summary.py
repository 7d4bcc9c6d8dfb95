"""Text for people: live progress, run summaries, run lists, error chains. Returns lines;
only cli.py prints."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netspec.protocol.errors import StepFailed
from netspec.protocol.messages import worst_status
from netspec.protocol.outcome import Outcome
from netspec.protocol.runoutcome import RunOutcome
from netspec.protocol.runrecord import MERGED, HostRecord, RunRecord, RunStatus
from netspec.protocol.runrecord import Step as StepRecord
from netspec.protocol.runrecord import StepHost as StepHostRecord

from ..record.progress import Progress
from .release import began_ns as release_began
from .release import skew_text as release_text

if TYPE_CHECKING:
    from netspec.analysis.resultset import ResultSet

MARK = {"ok": "ok", "warning": "WARN", "error": "FAIL"}


def seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    return f"{s * 1e3:.0f} ms" if s < 1 else f"{s:.2f} s"


LISTED_OK = 8  # hosts that acked a step ok, listed by name; beyond, counted
SLOWEST = 3


class LiveLine:
    """Words the engine's progress events as the live line. A step lists every host that
    did not ack ok, and the first LISTED_OK that did; the rest are counted at the step's
    end with the slowest of them, so that a line stays readable at a thousand hosts
    (run.json and `show --host` keep every host's detail)."""

    def __init__(self) -> None:
        self.unlisted: list[tuple[float, str]] = []  # the slowest of those counted
        self.counted = self.listed = 0
        self.step = ""  # the step whose line is open, if any

    def text(self, event: Progress) -> tuple[str, bool]:
        """The text for one progress event, and whether it ends a line."""
        if event.kind == "step":
            self.unlisted, self.counted, self.listed, self.step = [], 0, 0, event.step
            return f"  {event.step:<16}", False
        if event.kind == "outcome":
            # A k-of-n step's participant that failed, died, was late or was ended after its
            # barrier opened: a line of its own, naming it; the open step's line goes on below.
            said = f"    {event.step}: {event.host}/{event.text}"
            return (f"\n{said}\n  {self.step:<16}", False) if self.step else (said, True)
        if event.kind == "salvaged":  # a lost daemon's host, gathered without it
            return f" [salvaged host {event.host}: {event.text}]", False
        if event.kind == "notice":  # in a step, on its line; else (the fleet's tree, clksync) its own
            return (f" [{event.text}]", False) if self.step else (f"  [{event.text}]", True)
        if event.kind == "hosts":  # summarized by a fan-out tree: counted, never listed
            self.counted += event.done
            self.unlisted.extend(event.slowest)
            return "", False
        if event.kind == "host":
            if event.status == "ok" and self.listed >= LISTED_OK:
                self.counted += 1
                self.unlisted.append((event.seconds, event.host))
                return "", False
            self.listed += event.status == "ok"
            note = f" ({event.text})" if event.text and event.status != "ok" else ""
            mark = MARK.get(event.status, event.status)
            return f" {event.host} {mark} {seconds(event.seconds)}{note} ", False
        self.step = ""
        counted = _more_ok(self.counted, self.unlisted, self.listed)
        said = f"; {event.text}" if event.text else ""
        return f"{' ' if counted else ''}{counted} [{seconds(event.seconds)}{said}]", True


def error_lines(exc: BaseException) -> list[str]:
    """The chain of causes, outermost first, root cause last."""
    lines = [f"error: {exc}"]
    causes: list[BaseException | str]
    if isinstance(exc, StepFailed):
        causes = exc.causes()  # each once: hosts that failed alike are counted on one line
    else:
        causes, cause = [], exc.__cause__
        while cause is not None:
            causes.append(cause)
            cause = cause.__cause__
    for cause in causes:
        lines.extend(f"  caused by: {line}" if i == 0 else f"  {line}"
                     for i, line in enumerate(str(cause).splitlines()))
    if isinstance(exc, StepFailed) and len(causes) < len(exc.failed):
        lines.append("  (each host's own detail: ns_control show --host HOST)")
    return lines


def _more_ok(count: int, slowest: list[tuple[float, str]], listed: int) -> str:
    """The hosts that acked ok beyond those listed: counted, with the slowest named."""
    if not count:
        return ""
    named = ", ".join(f"{h} {seconds(s)}" for s, h in sorted(slowest, reverse=True)[:SLOWEST])
    return f"{'and ' if listed else ''}{count}{' more' if listed else ''} ok (slowest {named})"


def _host_state(step: StepRecord, info: StepHostRecord) -> tuple[str, float | None] | None:
    """How a host did in a step (ok, WARN, FAIL, waiting, ended, skipped) and how long it
    took; None for a host the step neither sent to nor heard of."""
    comps = info.components
    # A component still in the step when the run failed, ended with it, is no failure;
    # nor is one skipped there, having left the run in an earlier step (said there).
    live = [c.status for c in comps.values() if c.outcome not in (Outcome.ENDED, Outcome.SKIPPED)]
    quiet = Outcome.ENDED if any(c.outcome == Outcome.ENDED for c in comps.values()) else Outcome.SKIPPED
    worst = worst_status(live) if live or not comps else quiet
    if info.done_ns is not None and info.sent_ns is not None:
        return MARK.get(worst, worst), (info.done_ns - release_began(step, info.sent_ns)) / 1e9
    if comps or info.sent_ns is not None:
        return (Outcome.WAITING if not comps else MARK.get(worst, worst)), None
    return None


def _step_hosts(step: StepRecord, only: str | None, groups: dict[str, list[str]] | None = None) -> str:
    """The step's hosts: those that did not do well and the first LISTED_OK that did by
    name, the rest counted; a group's hosts (`groups`) as one n/N cell each."""
    grouped = {h for members in (groups or {}).values() for h in members} if only is None else set()
    parts, rest = [], []
    for host, info in step.hosts.items():
        state = _host_state(step, info) if only in (None, host) and host not in grouped else None
        if state is None:
            continue
        mark, took = state
        if took is not None and mark == "ok" and len(parts) >= LISTED_OK:
            rest.append((took, host))
        else:
            parts.append(f"{host} {mark}" + (f" {seconds(took)}" if took is not None else ""))
    more = _more_ok(len(rest), rest, len(parts))
    cells = [*parts, more] if more else parts
    if grouped:
        cells += [cell for group, members in (groups or {}).items()
                  if (cell := _group_cell(step, group, members))]
    return ", ".join(cells)


def _group_cell(step: StepRecord, group: str, members: list[str]) -> str:
    """A group's hosts in a step: how many of those in it did well, those that did not
    named (the first LISTED_OK), and the slowest that did."""
    states = {h: s for h in members if h in step.hosts and (s := _host_state(step, step.hosts[h]))}
    if not states:
        return ""
    ok = sorted(((took or 0.0, h) for h, (mark, took) in states.items() if mark == "ok"), reverse=True)
    bad = [f"{h} {mark}" for h, (mark, _) in states.items() if mark != "ok"]
    return f"{group} {len(ok)}/{len(states)} ok ({_named(bad, ok, 'not ok')})"


def _named(bad: list[str], good: list[tuple[float, str]], how: str) -> str:
    """A group's members that did not do well, the first LISTED_OK by name, and the
    SLOWEST of those that did (`good`, slowest first)."""
    said = [*bad[:LISTED_OK], *([f"{len(bad) - LISTED_OK} more {how}"] if len(bad) > LISTED_OK else [])]
    if good:
        said.append("slowest " + ", ".join(f"{name} {seconds(s)}" for s, name in good[:SLOWEST]))
    return "; ".join(said)


def run_lines(path: Path, record: RunRecord, only: str | None = None) -> list[str]:
    """A one-screen summary of one run; at fleet scale hosts that did well are counted, not
    listed. With `only`, one host's whole detail."""
    hosts = {h: info for h, info in sorted(record.hosts.items()) if only in (None, h)}
    many = only is None and len(hosts) > LISTED_OK
    outcome = RunOutcome.of(record)
    lines = [f"run {record.id}  {record.experiment}  {outcome.status}  "
             f"{seconds(record.duration_s)}", f"  dir: {path}"]
    lines.append(f"  {'step':<16} {'status':<8} {'time':>8} {'skew':>8}  hosts")
    unsaid = 0
    plan = record.plan
    groups = plan.groups if plan is not None else {}
    for step in record.steps:
        release = step.release
        headline = release.headline_ns
        skew = seconds(headline / 1e9) if headline is not None else "-"
        phase = step.phase + (" (at)" if release.mode == "at" else "")
        lines.append(f"  {phase:<16} {step.status:<8} "
                     f"{seconds(step.duration_s):>8} {skew:>8}  {_step_hosts(step, only, groups)}")
        if release.mode == "at" and (said := release_text(release)):
            lines.append(f"  {'':<16} {said}")  # the programs' skew beside the daemons', and what went wrong
        elif troubles := release.troubles():
            lines.append(f"  {'':<16} {'; '.join(troubles)}")
        for host, comp, ack in step.participants():
            if only not in (None, host):
                continue
            if many and ack.status == "ok":
                unsaid += bool(ack.message)
                continue
            if ack.message:
                lines.append(f"  {'':<16} {host}/{comp}: {ack.message}")
            lines.extend(f"  {'':<16}   {t}" for t in ack.traceback.splitlines())
    if unsaid:
        lines.append(f"  {unsaid} messages of ok acks not shown (ns_control show --host HOST)")
    lines.extend(_clock_lines(hosts, record.clock_reference, many))
    lines.extend(_placement_lines(record, hosts, not many))
    streams = {h: len(info.streams) for h, info in hosts.items() if info.streams}
    if streams and many:
        lines.append(f"  streams: {sum(streams.values())} files from {len(streams)} hosts "
                     f"(narrate: ns_control dump {path}/hosts)")
    elif streams:
        counts = ", ".join(f"{h} {n} file{'s' if n > 1 else ''}" for h, n in streams.items())
        lines.append(f"  streams: {counts} (narrate: ns_control dump {path}/hosts)")
    components = {name: info for name, info in sorted(record.components.items())
                  if only in (None, name.partition("/")[0])}
    component_groups = plan.component_groups if plan is not None and only is None else {}
    if component_groups:
        grouped = _component_group_lines(record, component_groups, lines)
        components = {n: i for n, i in components.items() if n not in grouped}
    if components:
        lines.append("  components:")
        # At fleet scale the first LISTED_OK of those that ended badly and of those that
        # exited 0 are listed, and the rest counted by how they ended.
        ended = [(n, i, _ended(i.returncode)) for n, i in components.items()]
        bad = [e for e in ended if e[2] != "exit 0"]
        good = [e for e in ended if e[2] == "exit 0"]
        listed = ([*bad[:LISTED_OK], *good[:LISTED_OK]] if many else ended)
        for name, info, how in listed:
            lines.append(f"    {name:<24} {how:<10} {seconds(info.duration_s)}")
        if len(listed) < len(components):
            rest = Counter(how for *_, how in [*bad[LISTED_OK:], *good[LISTED_OK:]])
            lines.append(f"    and {', '.join(f'{n} more {how}' for how, n in rest.most_common())}")
    lines.extend(f"  {text}" for text in record.cut_short_texts())
    error = outcome.error
    if error is not None:
        stopped = f"in phase '{error.phase}'" if error.phase else "before the first step"
        lines.append("  partial:" if outcome.status == RunStatus.PARTIAL else f"  stopped {stopped}:")
        for text in [error.message, *error.causes]:
            lines.extend(f"    {line}" for line in text.splitlines())
    return [line.rstrip() for line in lines]


def _component_group_lines(record: RunRecord, groups: dict[str, list[str]], lines: list[str]) -> set[str]:
    """Each group component's components as one line of `lines`: how many exited 0, those
    that did not named (the first LISTED_OK), and the slowest; the HOST/COMPONENT keys of
    run.json's components said so."""
    lines.append("  component groups:")
    hosts = {c.name: c.host for c in record.plan.components} if record.plan else {}
    said_here: set[str] = set()
    for group, members in groups.items():
        keys = {m: f"{hosts.get(m)}/{m}" for m in members}
        said_here.update(keys.values())
        ends = {m: info for m, key in keys.items() if (info := record.components.get(key))}
        good = sorted(((i.duration_s or 0.0, m) for m, i in ends.items() if i.returncode == 0), reverse=True)
        bad = [f"{m} {_ended(i.returncode)}" for m, i in ends.items() if i.returncode != 0]
        said = _named(bad, good, "not exit 0")
        unended = len(members) - len(ends)
        lines.append(f"    {group:<24} {len(good)}/{len(members)} exit 0" + (f", {unended} not ended"
                     if unended else "") + (f" ({said})" if said else ""))
    return said_here


def _placement_lines(record: RunRecord, hosts: dict[str, HostRecord], whole: bool) -> list[str]:
    """Where each container host ran (provenance's `placed`): the hosts placed alike on one
    line; with `whole` (a few hosts, or one host's detail), a line each with its container,
    network and cgroup too."""
    from netspec.analysis.provenance import placed

    rows = placed(record, whole, set(hosts), LISTED_OK)
    return ["  placement:", *(f"    {names}: {text}" for names, text in rows)] if rows else []


def _ended(code: int) -> str:
    return f"exit {code}" if code >= 0 else f"signal {-code}"


def _clock_lines(hosts: dict[str, HostRecord], reference: str | None, many: bool) -> list[str]:
    clocks = {h: info.clock for h, info in hosts.items() if info.clock and h != reference}
    served = reference in hosts and hosts[reference].clock
    lines = [f"  clock {reference}: reference"] if served else []
    if many and clocks:
        bounds = sorted((c.bound_ns, h) for h, c in clocks.items())
        median, (widest, host) = bounds[len(bounds) // 2][0], bounds[-1]
        lines.append(f"  clock: {len(clocks)} hosts, bound median {median / 1e3:.1f} us, "
                     f"widest {widest / 1e3:.1f} us ({host})")
        return lines
    for host, clock in clocks.items():
        lines.append(f"  clock {host}: offset {clock.offset_ns / 1e3:+.1f} us "
                     f"± {clock.bound_ns / 1e3:.1f} us ({clock.source} timestamps, "
                     f"{clock.exchanges} recent exchanges)")
    return lines


def list_lines(runs: list[tuple[Path, RunRecord]]) -> list[str]:
    if not runs:
        return ["no runs"]
    lines = [f"{'run':<26} {'experiment':<24} {'status':<12} {'time':>8}  stopped in"]
    for _, r in runs:
        outcome = RunOutcome.of(r)
        lines.append(f"{r.id:<26} {r.experiment:<24} {outcome.status:<12} "
                     f"{seconds(r.duration_s):>8}  {outcome.stopped_in(r)}".rstrip())
    return lines


def host_lines(outcome: dict[str, Any]) -> list[str]:
    """One line per host: what was done there, or why it failed."""
    return [f"{host}: {'FAILED: ' if isinstance(r, BaseException) else ''}{r}"
            for host, r in outcome.items()]


WARNING = "  warning: "  # how a merge's warning begins, among its lines


def merge_lines(result: ResultSet, took_s: float) -> list[str]:
    """What the merge made of a run: counts, the causality check, warnings."""
    lines = [f"merged: {result.records} records, {result.samples} sample values, {result.intervals} "
             f"intervals on one timeline in {seconds(took_s)} -> {result.directory}"]
    lines += [f"  causality {c.text()}" for c in result.causality]
    lines += [f"  workload {w.text()}" for w in result.workloads]
    lines += [f"  {line}" for line in result.links]
    if result.packets:  # the merge has loaded its tables' libraries by now
        from netspec.analysis.packets import packet_lines

        lines += [f"  {line}" for line in packet_lines(result.packets)]
    lines += [f"{WARNING}{w}" for w in result.warnings]
    return lines


def after_failure(lines: list[str]) -> list[str]:
    """A failed run's merge lines, its warnings counted: most follow from the failure (a
    process gone, a pair with no ends) and would bury the error above them."""
    warnings = [line for line in lines if line.startswith(WARNING)]
    if not warnings:
        return lines
    kept = [line for line in lines if not line.startswith(WARNING)]
    return [*kept[:1], f"  {len(warnings)} warning(s), most likely following from the error above "
            "(merged/summary.json lists them; `ns_control fetch RUN` shows them)", *kept[1:]]


def wall_line(total_s: float, run_s: float | None, merge_s: float) -> str:
    """Where the wall time went: the run (run.json's duration: daemons started, every step,
    daemons stopped), the merge, and the rest (the key read, the run directory made, the
    summary shown)."""
    rest = total_s - (run_s or 0.0) - merge_s
    return (f"took {seconds(total_s)} in all: {seconds(run_s)} the run, {seconds(merge_s)} the merge, "
            f"{seconds(max(rest, 0.0))} the rest")


def written_lines(directory: Path, files: list[str]) -> list[str]:
    """What a merge wrote into a directory (`files`, relative to it), file by file with its
    size: nothing else the directory holds."""
    sizes = {name: (directory / name).stat().st_size for name in files}
    return [f"wrote {len(sizes)} files ({sum(sizes.values()) / 1e6:.1f} MB) into {directory}:",
            *(f"  {name}  {size / 1e3:.1f} kB" for name, size in sizes.items())]


def results_lines(runs: list[tuple[Path, RunRecord]]) -> list[str]:
    """Each run with a merged result set: its size and the run's status."""
    from netspec.analysis.resultset import read_summary  # DuckDB's: a run does not import it

    rows = []
    for path, r in runs:
        merged = path / MERGED
        summary = read_summary(merged)
        if summary is None:
            continue
        size = sum(f.stat().st_size for f in merged.iterdir() if f.is_file())
        rows.append(f"{r.id:<26} {r.experiment:<24} {RunOutcome.of(r).status:<12} {summary.records:>10} "
                    f"{size / 1e6:>8.1f} MB  {merged}")
    if not rows:
        return ["no merged result sets (`ns_control fetch RUN` merges one)"]
    return [f"{'run':<26} {'experiment':<24} {'status':<12} {'records':>10} {'size':>11}  where", *rows]
