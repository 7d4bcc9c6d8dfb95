"""The commands over runs already made: list, show, merge (`fetch`), gather (`collect`),
export and import, report, narrate streams (`dump`) and browse (`serve`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from netspec.analysis.faultaudit import fault_lines
from netspec.analysis.usercode import UserCode
from netspec.protocol.errors import NetspecError
from netspec.protocol.runoutcome import EXIT_FAILED, EXIT_OK
from netspec.protocol.runrecord import RunRecord, read_run

from ..engine import conditions, summary
from ..engine.runner import merge
from ..engine.terminal import TERMINAL, print_lines, printable
from ..record.rundir import find_run, list_runs, settle

# A command imports what only it uses in its own body: ns_control's start is every command's
# latency, and the merge's libraries (numpy, pyarrow, DuckDB), the campaign's statistics and
# SSH's paramiko take about a second to import between them.


def user_code_options(parser: argparse.ArgumentParser) -> None:
    """--decoder and --filter: the user's own code a merge runs, named by the user (a run's
    record names its experiment's, and the merge never runs them on the record's say)."""
    parser.add_argument("--decoder", action="append", default=[], metavar="MODULE:FUNCTION",
                        help="run this decoder of your own in the merge (file.py:FUNCTION from here; "
                             "repeatable); one the run's record names is not run otherwise")
    parser.add_argument("--filter", action="append", default=[], metavar="MODULE:FUNCTION",
                        help="run this analysis filter of your own (file.py:FUNCTION from here; "
                             "repeatable); one the run's record names is not run otherwise")


def user_code(args: argparse.Namespace) -> UserCode:
    return UserCode(tuple(args.decoder), tuple(args.filter), Path.cwd())


def cmd_ls(args: argparse.Namespace) -> int:
    print_lines(summary.list_lines(_runs(args.runs)))
    return EXIT_OK


def _runs(root: Path) -> list[tuple[Path, RunRecord]]:
    """The runs under `root`; a run whose record cannot be read is said on stderr."""
    unreadable: list[str] = []
    runs = list_runs(root, unreadable)
    print_lines([f"warning: not listed: {said}" for said in unreadable], sys.stderr)
    return runs


def cmd_show(args: argparse.Namespace) -> int:
    path = find_run(args.runs, args.run)
    record = settle(path, read_run(path))
    if args.host is not None and args.host not in record.hosts:
        names = sorted(record.hosts)
        listed = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        raise NetspecError(f"run {record.id} has no host '{args.host}' (its hosts: {listed or 'none'})")
    print_lines(summary.run_lines(path, record, args.host))
    print_lines(conditions.record_lines(record, args.host))  # each step's link changes, each host's backends
    return EXIT_OK


def cmd_results(args: argparse.Namespace) -> int:
    print_lines(summary.results_lines(_runs(args.runs)))
    return EXIT_OK


def cmd_fetch(args: argparse.Namespace) -> int:
    from netspec.analysis.resultset import MERGED

    from ..gather.pull import pull_run

    if args.source:
        path = pull_run(args.source, args.run, args.runs, args.accept_new_host_keys)
        TERMINAL.out(f"fetched {path.name} from {args.source} into {path}")
    else:
        path = find_run(args.runs, args.run)
    merged = merge(path, TERMINAL, args.to, user_code(args))
    TERMINAL.lines(merged.lines)
    if merged.ok:
        TERMINAL.lines(summary.written_lines(args.to or path / MERGED, merged.files))
    return EXIT_OK if merged.ok else EXIT_FAILED


def cmd_collect(args: argparse.Namespace) -> int:
    from ..gather.collect import collect_run

    path = find_run(args.runs, args.run)
    found = collect_run(path, args.accept_new_host_keys)
    if not found:
        print("no host of this run was reached: nothing to collect")
        return EXIT_OK
    # Through the terminal, as a run's lines: a closed stdout does not stop the merge.
    TERMINAL.lines([f"host {host}: {salvaged.summary()}" for host, salvaged in found.items()])
    merged = merge(path, TERMINAL, code=user_code(args))
    TERMINAL.lines(merged.lines)
    failed = [host for host, salvaged in found.items() if salvaged.error]
    return EXIT_FAILED if failed or not merged.ok else EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from ..gather.bundle import CRATE, export_run

    path = export_run(find_run(args.runs, args.run), args.to)
    print(f"exported {path} ({path.stat().st_size / 1e6:.1f} MB, with {CRATE})")
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    from ..gather.bundle import import_run

    path = import_run(args.file, args.runs, round(args.max_size * 1e9))
    print(f"imported {path.name} into {path} (every file checked against its crate's sha256)")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    # scipy takes half a second to import: only the command that needs it pays for it.
    from netspec.analysis.metrics import run_metrics
    from netspec.analysis.phases import run_phase_lines
    from netspec.analysis.report import report_lines, write_csv
    from netspec.analysis.resultset import MERGED, is_current, read_summary

    from ..campaigns.campaign import (
        CampaignDir,
        campaign_metrics,
        plot_points,
        starved_lines,
        sweep_fit_lines,
    )

    campaign = _campaign(args, args.run_refs[0]) if len(args.run_refs) == 1 else None
    if campaign is not None:
        cdir = CampaignDir.open(campaign)
        table = campaign_metrics(cdir)
        plots = plot_points(cdir, table)
        empty = [f"{p.label}: no counted runs ({len(p.runs)} run, {p.done or 'not done'})"
                 for p in cdir.record.points if not table[p.label]]
        print_lines([*empty, *report_lines(table), *sweep_fit_lines(cdir, table), *starved_lines(cdir),
                     f"plots: {', '.join(str(p) for p in plots)}"])
    else:
        paths = [find_run(args.runs, ref) for ref in args.run_refs]
        table = {}
        for path in paths:
            if not is_current(path / MERGED):
                if (path / MERGED / "summary.json").is_file():
                    print(f"{path.name}: its result set is of an older netspec: merging it again",
                          file=sys.stderr)
                if not merge(path, TERMINAL, code=user_code(args)).ok:
                    return EXIT_FAILED
            table[path.name] = run_metrics(path / MERGED)
        if len(table) < len(paths):
            raise NetspecError("the same run is named twice")
        from netspec.analysis.faults import recovery_lines
        from netspec.analysis.links import merged_lines
        from netspec.analysis.packets import packet_lines
        from netspec.analysis.packetsplit import split_lines
        from netspec.analysis.resultset import open_tables

        audits = []  # each run's link audit (analysis/links.py), for a run with links:
        for path in paths:
            summary = read_summary(path / MERGED)
            said = merged_lines(path / MERGED) + packet_lines(summary.packets if summary is not None else [])
            audits += [f"{path.name}:", *said] if said else []
        # and each run's faults, their instants against their effects (engine/faults.py)
        faults = [line for path in paths for line in fault_lines(read_run(path))]
        for path in paths:  # and each fault's recovery, from the operations (analysis/faults.py)
            with open_tables(path / MERGED) as db:
                faults += recovery_lines(db)
                faults += split_lines(db)  # and each pair against its packets (analysis/packetsplit.py)
        per_phase = [line for path in paths
                     for line in run_phase_lines(path / MERGED, path.name, read_run(path).host_names)]
        print_lines([*run_differences(paths), *per_phase, *report_lines(table), *audits, *faults])
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            write_csv(table, f)
        print(f"written: {args.csv}")
    return EXIT_OK


def run_differences(paths: list[Path]) -> list[str]:
    """What differs between each run and the first, said before they are compared."""
    from netspec.analysis.provenance import differences, load

    base = load(paths[0])
    lines = []
    for path in paths[1:]:
        diffs = differences(base, load(path))
        if diffs:
            lines.append(f"{path.name} differs from {paths[0].name} in {len(diffs)} way(s):")
            lines.extend(f"  {d}" for d in diffs)
    return lines


def _campaign(args: argparse.Namespace, ref: str) -> Path | None:
    """The campaign `ref` names, or None if it names none (then it is a run)."""
    from ..campaigns.campaign import CampaignError, find_campaign

    try:
        return find_campaign(args.campaigns, ref)
    except CampaignError:
        return None


def cmd_dump(args: argparse.Namespace) -> int:
    from netspec.analysis.narrate import narrate
    from netspec.analysis.usercode import load_function
    from netspec.datastream.instrument import selects
    from netspec.datastream.reader import StreamReader, read_streams

    paths = [p for f in args.files for p in (sorted(f.rglob("*.ds")) if f.is_dir() else [f])]
    if not paths:
        raise NetspecError(f"no .ds files in {', '.join(map(str, args.files))}")
    readers: list[StreamReader] = []
    decoders = {name: load_function(name, Path.cwd(), "decoder") for name in args.decoder}
    records = read_streams(paths, readers, decoders)
    if args.match:
        # The stream's own records (losses above all) are never filtered out.
        records = (r for r in records
                   if r.entity.group == "DS" or selects(args.match, r.entity.full_name))
    try:
        for line in narrate(readers, records):
            print(printable(line))
        sys.stdout.flush()  # a closed stdout (`dump ... | head`) fails here, not at exit: 141, by main
    finally:
        for reader in readers:
            reader.close()
    warnings = [w for r in readers for w in r.warnings]
    print_lines([f"warning: {w}" for w in warnings], sys.stderr)
    return EXIT_FAILED if any(r.records_lost for r in readers) else EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from netspec.web.serve import serve  # the web stack: only for this command

    serve(args.runs, args.campaigns, args.host, args.port, args.open, lambda line: print(line, flush=True))
    return EXIT_OK

