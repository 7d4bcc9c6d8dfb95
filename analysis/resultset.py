"""A run's result set: its directory's merged/ folder, made from the gathered streams.

    events.parquet    every record on the global timeline, with its error bound
    samples.parquet   sample groups (CAMP, clksync) in long form
    intervals.parquet interval records, and the experiment's cross-host pairs
    clock.parquet     each host's clock fit: offset and bounds at every knot
    phases.parquet    when each component entered and finished each step, globally
    links.parquet     the link audit: per link and step, configured against achieved (links.py)
    operations.parquet the programs' operations with their outcomes (operations.py)
    rates.parquet, usage.parquet, workload.parquet, states.parquet   derived (derive.py)
    trace.json        the timeline for ui.perfetto.dev
    narration.txt     the timeline in words
    plots/*.png       intervals, clock offsets, CAMP per host
    summary.json      counts, warnings, the causality check and the workloads

DuckDB queries the Parquet files in place (intervals are derived that way); pyarrow reads them
as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from netspec.clksync.fit import ClockFit
from netspec.clksync.records import fit_run
from netspec.datastream.reader import Decoder
from netspec.protocol.errors import ProtocolError
from netspec.protocol.names import confined
from netspec.protocol.runplan import PlanPair
from netspec.protocol.runrecord import MERGED, RunRecord, Step, read_run

from .derive import Workload, camp_on_one_kernel, camp_warnings, shared_kernel_text, write_derived
from .faults import write_faults
from .graph import run_graph
from .links import configured_links, write_links
from .links import lines as link_lines
from .narrate import write_narration
from .operations import write_operations
from .packets import LinkCounts, write_packets
from .pairs import PairCounts, pair_counts, pair_params, pair_sql
from .provenance import host_facts, shared_kernels
from .starved import Starved, starved
from .timeline import merge_files
from .trace import TRACE_LIMIT, write_trace
from .usercode import NONE, UserCode, UserCodeError, load_function


class Causality(msgspec.Struct):
    """A pair's ends that land before their starts: each is a measured lower bound on how
    far apart the two hosts' clocks are on the merged timeline. summary.json's `causality`
    holds one per pair."""

    pair: str = ""
    matched: int = 0
    violations: int = 0
    worst_ns: int = 0  # how far the worst end lands before its start (0 if none)
    beyond_bound: int = 0  # violations larger than the two records' bounds together
    # Both ends on one host (KU's pipeline loop): the one-clock duration against the same
    # pair on the global timeline; their largest difference is the merge's own error there.
    one_clock: int = 0
    one_clock_worst_ns: int = 0
    one_clock_beyond_bound: int = 0
    starts: int = 0  # the starts (tags) the matched ends are of
    several_ends: int = 0  # starts with more than one end matched (match: all)

    def text(self) -> str:
        # Ends matched to fewer starts are no clean match of one end a start: said as such.
        several = (f" ({self.starts} starts, {self.several_ends} of them with several ends)"
                   if self.several_ends else "")
        if not self.matched:
            text = f"{self.pair}: nothing matched, nothing to check"
        elif not self.violations:
            text = (f"{self.pair}: {self.matched} {'ends ' if several else ''}matched{several}, every end "
                    "after its start")
        else:
            text = (f"{self.pair}: {self.violations} of {self.matched} ends{several} land before their "
                    f"starts, by up to {self.worst_ns / 1e3:.1f} us: the alignment error is at least that"
                    + (f"; {self.beyond_bound} beyond their error bounds" if self.beyond_bound else
                       ", within the error bounds"))
        if self.one_clock:
            text += (f"; on one clock, the global timeline is within {self.one_clock_worst_ns / 1e3:.1f} us "
                     "of it"
                     + (f" ({self.one_clock_beyond_bound} beyond the bounds)" if self.one_clock_beyond_bound
                        else ", within the bounds"))
        return text


@dataclass
class ResultSet:
    run: Path
    directory: Path
    records: int = 0
    samples: int = 0
    intervals: int = 0
    operations: int = 0
    faults: int = 0
    warnings: list[str] = field(default_factory=list)
    causality: list[Causality] = field(default_factory=list)
    pairs: list[PairCounts] = field(default_factory=list)  # what each pair matched and left unmatched
    workloads: list[Workload] = field(default_factory=list)
    shared_kernel: list[list[str]] = field(default_factory=list)  # CAMP-sampled hosts on one kernel
    starved: list[Starved] = field(default_factory=list)  # components starved of CPU in a step
    files: list[str] = field(default_factory=list)  # what this merge wrote, relative to `directory`
    plots: list[Path] = field(default_factory=list)
    links: list[str] = field(default_factory=list)  # the link audit's lines (links.lines), if the run has one
    packets: list[LinkCounts] = field(default_factory=list)  # packets.parquet's counts, if it captured


# The result set's columns (docs/results.md); 2: intervals' and usage's start_ts and end_ts,
# clock's ts_local and ts, states' last_ts (none a name DuckDB makes the user quote); 3:
# intervals' start_component and end_component, every end of a pair's tag (match: all),
# summary.json's pairs (what each matched and left unmatched) and shared_kernel, and events'
# value_int (integers exact); 4: links.parquet, the link audit (analysis/links.py); 5:
# summary.json's `files` (what the merge wrote, which the next removes first) and its pairs'
# `tags_with_several_ends` (was `several_ends`). Within 5: summary.json's `starved` (a set
# without it starved nothing that was measured); 6: operations.parquet (analysis/operations.py),
# summary.json's `operations`, a histogram row's data with its spec; 7: faults.parquet
# (analysis/faults.py), summary.json's `faults`; 8: faults.parquet a row per entry of the file's
# `faults:` (a partition's directions, `directions`, in one), its `role`, `holder` and
# `claimed_ts`; no `entry`. Within 8: packets.parquet (analysis/packets.py), summary.json's `packets`.
RESULT_FORMAT = 8


SUMMARY = "summary.json"


class Summary(msgspec.Struct):
    """A result set's summary.json, written by `merge_run` and read only through
    `read_summary`: its format (RESULT_FORMAT when made by this netspec), the run, the
    counts, what the merge warned of, each pair's causality check and what it matched
    (Causality, PairCounts), the workloads (Workload), the hosts that share one kernel and
    each step's components starved of CPU (Starved): each a Struct of its own module, which
    the readers read by field."""

    format: int = 0  # 0: a result set of before it said its format
    run: str = ""
    records: int = 0
    samples: int = 0
    intervals: int = 0
    warnings: list[str] = []
    causality: list[Causality] = []
    pairs: list[PairCounts] = []
    workload: list[Workload] = []
    shared_kernel: list[list[str]] = []
    # Every file the merge wrote (summary.json too), relative to its directory: the next
    # merge there removes them first, and nothing else (a user's own files stay).
    files: list[str] = []
    starved: list[Starved] = []
    operations: int = 0  # operations.parquet's rows
    faults: int = 0  # faults.parquet's rows
    packets: list[LinkCounts] = []  # what packets.parquet matched, per direction and step


def read_summary(merged: Path) -> Summary | None:
    """The summary.json of the result set in `merged`; None when it has none, or one that
    cannot be read or is not a summary (not JSON, or a key of the wrong type)."""
    try:
        return msgspec.json.decode((merged / SUMMARY).read_bytes(), type=Summary)
    except (OSError, msgspec.DecodeError):  # a ValidationError is a DecodeError
        return None


def is_current(merged: Path) -> bool:
    """Whether `merged` holds a result set of this netspec's format."""
    summary = read_summary(merged)
    return summary is not None and summary.format == RESULT_FORMAT


def _user_decoders(record: RunRecord, code: UserCode, warnings: list[str]) -> dict[str, Decoder]:
    """The decoders the user named, each loaded or said why not; those the run's record names
    and the user did not are said, never loaded (a received run's record is data)."""
    found: dict[str, Decoder] = {}
    for name in code.decoders:
        try:
            found[name] = load_function(name, code.base, "decoder")
        except UserCodeError as exc:
            warnings.append(f"decoder {name}: cannot be loaded ({exc}); its events' data stays raw")
    unnamed = [name for name in record.decoders if name not in code.decoders]
    if unnamed:
        warnings.append(f"decoder {', '.join(unnamed)} not run: the run's record names it, and a decoder "
                        "runs only when you name it (the experiment file you run, or ns_control fetch "
                        f"--decoder {unnamed[0]}); its events' data stays raw")
    return found


def merge_run(run: Path, out: Path | None = None, code: UserCode = NONE) -> ResultSet:
    """Merge the run directory `run` into `out` (run/merged/ by default), replacing the result
    set there: what the last merge there wrote (its summary's `files`) is removed first, so no
    output of a node this merge skips is left looking new; other files in `out` stay. Of the
    user's own decoders and filters, only those in `code` run (the user named them): what
    the run's record names beside them is said in the warnings, not run."""
    record = read_run(run)
    out = out or run / MERGED
    result = ResultSet(run, out)
    out.mkdir(parents=True, exist_ok=True)
    result.warnings += _remove_last_merge(out)
    before = _stamps(out)
    try:
        fits = fit_run(run, record)
    except (OSError, ValueError, KeyError) as exc:
        fits = {}
        result.warnings.append(f"no clock fit ({exc}): times are each host's own")
    files = {d.name: sorted(d.glob("streams/*.ds")) for d in sorted((run / "hosts").iterdir()) if d.is_dir()}
    decoders = _user_decoders(record, code, result.warnings)
    counts = merge_files(files, fits, out, decoders)
    result.records, result.samples = counts.records, counts.samples
    result.warnings += counts.warnings
    write_clock(out / "clock.parquet", fits)
    write_phases(out / "phases.parquet", record.steps, fits)
    db = open_tables(out)
    audit = write_links(db, out / "links.parquet", configured_links(record))
    result.warnings += audit.warnings()
    groups = record.plan.component_groups if record.plan is not None else {}
    result.intervals, result.causality = write_intervals(db, out, record.pairs, groups)
    result.operations = write_operations(db, out)
    result.pairs = [pair_counts(db, "events", _params(name, p, groups)) for name, p in record.pairs.items()]
    only = {counts.pair: counts.only() for counts in result.pairs}
    result.warnings += [f"pair {c.pair} matched nothing: no {record.pairs[c.pair].start} was followed by "
                        f"its {record.pairs[c.pair].end}{only[c.pair]}; check both names, and the "
                        "components a pair counts only, against `ns_control dump`"
                        for c in result.causality if not c.matched]
    result.warnings += [w for counts in result.pairs for w in counts.warnings()]
    result.workloads = write_derived(db, out)
    result.warnings += camp_warnings(db)
    result.shared_kernel = camp_on_one_kernel(db, shared_kernels(host_facts(run, record.hosts)))
    result.warnings += [shared_kernel_text(hosts) for hosts in result.shared_kernel]
    db = open_tables(out)  # with the tables just written
    result.faults = write_faults(db, out / "faults.parquet", record, result.operations > 0)
    captured = write_packets(db, run, out, fits)
    result.packets, result.warnings = captured.counts, result.warnings + captured.warnings
    result.starved = starved(db)
    result.warnings += [s.text() for s in result.starved]
    result.links = link_lines(db)
    origin, phases = _bounds(db)
    trace = write_trace(db, out / "trace.json")
    if trace.truncated:
        result.warnings.append(f"trace.json holds the first {TRACE_LIMIT} events and intervals only")
    write_narration(db, out / "narration.txt")
    # fetchall, never fetchone, on this connection: DuckDB 2 keeps a result read in part
    # pending, and refuses the graph's relations until it is read to its end.
    if db.execute(PLOTTABLE_SQL).fetchall()[0][0]:
        # matplotlib takes half a second to import: a run with nothing to draw does not pay it.
        from .plots import plot_all

        result.plots = plot_all(db, out / "plots", origin)
    if record.graph:
        result.warnings += run_graph(db, record.graph, out, code.base, origin, phases,
                                     trusted=code.trusted_filters())
    written = {name for name, stamp in _stamps(out).items() if before.get(name) != stamp}
    result.files = sorted(written | {SUMMARY})
    summary = Summary(RESULT_FORMAT, record.id, result.records, result.samples, result.intervals,
                      result.warnings, result.causality, result.pairs, result.workloads,
                      result.shared_kernel, result.files, result.starved, result.operations, result.faults,
                      result.packets)
    _write_summary(out, summary)
    return result


def add_files(result: ResultSet, written: list[Path]) -> None:
    """Count `written` (files in the result set's directory written after `merge_run`:
    report.html) among what the merge wrote, in `result` and its summary, so that the next
    merge removes them first too."""
    result.files = sorted({*result.files, *(str(path.relative_to(result.directory)) for path in written)})
    summary = read_summary(result.directory)
    if summary is not None:
        summary.files = result.files
        _write_summary(result.directory, summary)


def _write_summary(merged: Path, summary: Summary) -> None:
    (merged / SUMMARY).write_bytes(msgspec.json.format(msgspec.json.encode(summary), indent=1) + b"\n")


def _stamps(out: Path) -> dict[str, tuple[int, int, int]]:
    """Each file under `out` (relative) with what changes when it is written anew."""
    stamps = {}
    for path in out.rglob("*"):
        if path.is_file():
            stat = path.stat()
            stamps[str(path.relative_to(out))] = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
    return stamps


def _remove_last_merge(out: Path) -> list[str]:
    """Remove the files the last merge in `out` wrote, as its summary lists them (names read
    from a file: each confined to `out`, or left alone); what was left alone, said."""
    last = read_summary(out)
    refused = []
    for name in last.files if last is not None else []:
        try:
            confined(out, name, "result file").unlink(missing_ok=True)
        except (ProtocolError, IsADirectoryError) as exc:
            refused.append(f"the last merge's {SUMMARY} lists {name!r}, left alone: {exc}")
    return refused


def _params(name: str, pair: PlanPair, groups: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """The query parameters of the run's pair `name` (`groups`: the plan's group components)."""
    return pair_params(name, **msgspec.structs.asdict(pair), groups=groups)


PLOTTABLE_SQL = """SELECT EXISTS (FROM intervals) OR EXISTS (FROM rates)
                         OR EXISTS (FROM clock WHERE source != 'reference')"""


def _bounds(db: duckdb.DuckDBPyConnection) -> tuple[int, dict[str, tuple[int, int]]]:
    """The run's first instant, and each phase's global start and end."""
    phases = {p: (s, e) for p, s, e in db.execute(
        "SELECT phase, min(entered), max(acked) FROM phases GROUP BY phase").fetchall() if s is not None}
    origin = min((s for s, _ in phases.values()), default=None)
    if origin is None:
        origin = db.execute("SELECT min(ts) FROM events").fetchall()[0][0] or 0
    return origin, phases


def open_tables(merged: Path) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with a view on each Parquet table in `merged`, named as its file."""
    db = duckdb.connect()
    for path in sorted(merged.glob("*.parquet")):
        name, quoted = path.stem.replace('"', '""'), str(path).replace("'", "''")
        db.execute(f"CREATE VIEW \"{name}\" AS SELECT * FROM read_parquet('{quoted}')")
    return db


CLOCK = pa.schema([
    ("host", pa.string()), ("reference", pa.string()), ("segment", pa.int32()), ("ts_local", pa.int64()),
    ("ts", pa.int64()), ("offset_ns", pa.int64()), ("lo_ns", pa.int64()), ("hi_ns", pa.int64()),
    ("bound_ns", pa.int64()), ("source", pa.string())])
PHASES = pa.schema([
    ("step", pa.int32()), ("phase", pa.string()), ("host", pa.string()), ("component", pa.string()),
    ("status", pa.string()), ("entered", pa.int64()), ("acked", pa.int64())])


def write_clock(path: Path, fits: dict[str, ClockFit]) -> None:
    rows = [{"host": host, "reference": fit.reference, "segment": n, "ts_local": k.at, "ts": k.at - k.offset,
             "offset_ns": k.offset, "lo_ns": k.lo, "hi_ns": k.hi,
             "bound_ns": max(k.hi - k.offset, k.offset - k.lo), "source": fit.source}
            for host, fit in sorted(fits.items()) for n, seg in enumerate(fit.segments) for k in seg.knots]
    pq.write_table(pa.Table.from_pylist(rows, schema=CLOCK), path)


def _global(fits: dict[str, ClockFit], host: str, local: list[int | None]) -> list[int | None]:
    fit = fits.get(host)
    known = [t for t in local if t is not None]
    if fit is None or not fit.usable or not known:
        return local
    converted = iter(fit.to_global(np.array(known, dtype=np.int64))[0].tolist())
    return [None if t is None else next(converted) for t in local]


def write_phases(path: Path, steps: list[Step], fits: dict[str, ClockFit]) -> None:
    """One row per step, host and component: entered and acked on the global timeline."""
    rows = []
    for i, step in enumerate(steps):
        for host, h in sorted(step.hosts.items()):
            comps = sorted(h.components.items())
            entered = _global(fits, host, [c.entered_ns for _, c in comps])
            acked = _global(fits, host, [c.acked_ns for _, c in comps])
            rows += [{"step": i, "phase": step.phase, "host": host, "component": name,
                      "status": c.status or None, "entered": e, "acked": a}
                     for (name, c), e, a in zip(comps, entered, acked, strict=True)]
    pq.write_table(pa.Table.from_pylist(rows, schema=PHASES), path)


INTERVALS_SQL = """
SELECT entity AS name, host AS start_host, host AS end_host, tag, "start" AS start_ts, ts AS end_ts,
       CAST(value AS BIGINT) AS duration_ns, 0::BIGINT AS bound_ns, 'interval' AS source,
       ts - "start" AS global_ns, 2 * bound_ns AS global_bound_ns, component AS start_component,
       component AS end_component
FROM events WHERE kind = 'interval'
"""

def write_intervals(db: duckdb.DuckDBPyConnection, out: Path,
                    pairs: dict[str, PlanPair],
                    groups: dict[str, list[str]] | None = None) -> tuple[int, list[Causality]]:
    """intervals.parquet from the interval records and each pair; the causality check."""
    db.execute("DROP VIEW IF EXISTS intervals")
    db.execute("CREATE TABLE intervals AS " + INTERVALS_SQL)
    for name, p in pairs.items():
        db.execute("INSERT INTO intervals " + pair_sql("events"), _params(name, p, groups))
    db.execute(f"""COPY (SELECT * FROM intervals ORDER BY end_ts) TO '{out / 'intervals.parquet'}'
                   (FORMAT parquet)""")
    total = db.execute("SELECT count(*) FROM intervals").fetchall()[0][0]
    checks = []
    for name in pairs:
        matched, bad, worst, beyond = db.execute(
            "SELECT count(*), count(*) FILTER (duration_ns < 0), coalesce(-min(duration_ns) FILTER "
            "(duration_ns < 0), 0), count(*) FILTER (duration_ns < 0 AND -duration_ns > bound_ns) "
            "FROM intervals WHERE source = 'pair' AND name = ?", [name]).fetchall()[0]
        one = db.execute(
            "SELECT count(*), coalesce(max(abs(global_ns - duration_ns)), 0), "
            "count(*) FILTER (abs(global_ns - duration_ns) > global_bound_ns) FROM intervals "
            "WHERE source = 'pair' AND name = ? AND start_host = end_host", [name]).fetchall()[0]
        starts, several = db.execute(
            "SELECT count(*), count(*) FILTER (n > 1) FROM (SELECT count(*) AS n FROM intervals "
            "WHERE source = 'pair' AND name = ? GROUP BY tag)", [name]).fetchall()[0]
        checks.append(Causality(name, matched, bad, worst, beyond, *one, starts, several))
    return total, checks
