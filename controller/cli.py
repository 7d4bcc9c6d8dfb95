"""`ns_control`: arguments, exit codes and printing; the work happens elsewhere."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import traceback
from pathlib import Path

import duckdb
from netspec.analysis.narrate import narrate
from netspec.analysis.read import StreamReader, read_streams
from netspec.analysis.resultset import MERGED, merge_run
from netspec.daemon.facts import netspec_version
from netspec.nodelib.auth import load_or_create_key
from netspec.nodelib.errors import ConfigError, Interrupted, NetspecError, StreamError
from netspec.nodelib.instrument import selects

from . import summary
from .engine import Progress, Run
from .load import load
from .pull import pull_run
from .remote import for_each_host
from .rundir import RunDir, find_run, list_runs, load_record

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ns_control",
                                     description="Run distributed experiments in phases.")
    parser.add_argument("--version", action="version", version=f"netspec {netspec_version()}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run an experiment file")
    run.add_argument("file", type=Path)
    run.add_argument("--quiet", "-q", action="store_true", help="print only errors")
    run.add_argument("--keep-daemons", action="store_true",
                     help="leave the daemons of ssh hosts running (stop them with `down`)")
    up = sub.add_parser("up", help="start the daemons of a file's ssh hosts, to outlive runs")
    up.add_argument("file", type=Path)
    down = sub.add_parser("down", help="stop the daemons `up` or --keep-daemons left")
    down.add_argument("file", type=Path)
    for p in (run, up, down):
        p.add_argument("--accept-new-host-keys", action="store_true",
                       help="trust ssh host keys seen for the first time (added to known_hosts)")
    check = sub.add_parser("check", help="validate an experiment file")
    check.add_argument("file", type=Path)
    dump = sub.add_parser("dump", help="narrate datastream files (a directory: every .ds in it)")
    dump.add_argument("files", type=Path, nargs="+")
    dump.add_argument("--match", action="append", default=[], metavar="PATTERN",
                      help="only entities matching GROUP/name (wildcards; repeatable)")
    ls = sub.add_parser("ls", help="list runs")
    show = sub.add_parser("show", help="summarise a run")
    show.add_argument("run", nargs="?", default="latest")
    fetch = sub.add_parser("fetch", help="merge a run's streams (again) into a result set; --from "
                                         "copies the run from another controller host first")
    fetch.add_argument("run", nargs="?", default="latest")
    fetch.add_argument("--from", dest="source", metavar="[USER@]HOST[:RUNS]",
                       help="the controller host that ran it (over SSH), and its runs directory")
    fetch.add_argument("--to", type=Path, metavar="DIR", help="write the result set here, not in RUN/merged")
    fetch.add_argument("--accept-new-host-keys", action="store_true",
                       help="trust the --from host's ssh key if seen for the first time")
    results = sub.add_parser("results", help="list merged result sets with their size and status")
    report = sub.add_parser("report", help="statistics of runs' metrics (Getstats); the first run is "
                                           "the baseline of the others")
    report.add_argument("run_refs", nargs="*", default=["latest"], metavar="RUN")
    report.add_argument("--csv", type=Path, metavar="FILE", help="also write the table as CSV")
    for p in (run, ls, show, fetch, results, report):
        p.add_argument("--runs", type=Path, default=Path("runs"), help="runs directory")
    return parser.parse_args(argv)


def _print_progress(event: Progress) -> None:
    text, end = summary.progress_text(event)
    print(text, end="\n" if end else "", flush=True)


async def _run(run: Run) -> None:
    loop = asyncio.get_running_loop()

    def interrupt() -> None:
        run.interrupt()
        # A second Ctrl-C falls through to Python's default and ends the controller.
        loop.remove_signal_handler(signal.SIGINT)

    loop.add_signal_handler(signal.SIGINT, interrupt)
    loop.add_signal_handler(signal.SIGTERM, run.interrupt)
    await run.execute()


def cmd_run(args: argparse.Namespace) -> int:
    plan = load(args.file)
    key = load_or_create_key()
    rundir = RunDir.create(args.runs, plan.name, plan.text, {
        "experiment_sha256": plan.sha256, "plan": plan.resolved(), "hosts": {}, "steps": [],
        "components": {}, "versions": {"netspec": netspec_version(),
                                       "python": sys.version.split()[0]}})
    rundir.keep_programs([c.program for c in plan.components if c.program] + plan.filter_files())
    if not args.quiet:
        print(f"netspec: running {plan.name} as {rundir.id}", flush=True)
    run = Run(plan, rundir, key, (lambda e: None) if args.quiet else _print_progress,
              accept_new_host_keys=args.accept_new_host_keys, keep_daemons=args.keep_daemons)
    try:
        asyncio.run(_run(run))
    except KeyboardInterrupt:
        rundir.finish("interrupted", {"type": "Interrupted", "phase": run.phase, "causes": [],
                                      "message": "interrupted twice: stopped without gathering"})
        print(f"\ninterrupted twice: stopped without gathering; daemons end their runs "
              f"by themselves. Run directory: {rundir.path}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except NetspecError as exc:
        if not args.quiet:
            print(flush=True)  # end the progress line before the error goes to stderr
        _print_lines(summary.error_lines(exc), sys.stderr)
        _merge(rundir.path, sys.stderr)
        print(f"run directory (everything gathered so far): {rundir.path}", file=sys.stderr)
        return EXIT_INTERRUPTED if isinstance(exc, Interrupted) else EXIT_FAILED
    if not args.quiet:
        _print_lines(summary.run_lines(rundir.path, rundir.record))
    # The run went well even if its merge did not: that is said, and `fetch` tries again.
    _merge(rundir.path, None if args.quiet else sys.stdout)
    return EXIT_OK


def _merge(run: Path, stream, out: Path | None = None) -> bool:
    """Merge a run's streams, gathered in full or not; the run's own files stay as they are
    whatever happens here. What the merge made goes to `stream` (None: nowhere), a failure
    to stderr."""
    try:
        result = merge_run(run, out)
    except (OSError, ValueError, StreamError, duckdb.Error) as exc:
        print(f"merge failed: {exc} (the streams are untouched; `ns_control fetch` tries again)",
              file=sys.stderr)
        return False
    if stream is not None:
        _print_lines(summary.merge_lines(result), stream)
    return True


def cmd_fetch(args: argparse.Namespace) -> int:
    if args.source:
        path = pull_run(args.source, args.run, args.runs, args.accept_new_host_keys)
        print(f"fetched {path.name} from {args.source} into {path}")
    else:
        path = find_run(args.runs, args.run)
    return EXIT_OK if _merge(path, sys.stdout, args.to) else EXIT_FAILED


def cmd_results(args: argparse.Namespace) -> int:
    _print_lines(summary.results_lines(list_runs(args.runs)))
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    # scipy takes half a second to import: only the command that needs it pays for it.
    from netspec.analysis.metrics import run_metrics
    from netspec.analysis.report import report_lines, write_csv

    paths = [find_run(args.runs, ref) for ref in args.run_refs]
    runs = {}
    for path in paths:
        if not (path / MERGED / "summary.json").is_file() and not _merge(path, None):
            return EXIT_FAILED
        runs[path.name] = run_metrics(path / MERGED)
    if len(runs) < len(paths):
        raise NetspecError("the same run is named twice")
    _print_lines(report_lines(runs))
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            write_csv(runs, f)
        print(f"written: {args.csv}")
    return EXIT_OK


def cmd_check(args: argparse.Namespace) -> int:
    plan = load(args.file)
    steps = " -> ".join(s.phase for s in plan.schedule)
    print(f"{args.file}: ok: experiment '{plan.name}', {len(plan.hosts)} host(s), "
          f"{len(plan.components)} component(s)\n  schedule: {steps}")
    return EXIT_OK


def cmd_dump(args: argparse.Namespace) -> int:
    paths = [p for f in args.files for p in (sorted(f.rglob("*.ds")) if f.is_dir() else [f])]
    if not paths:
        raise NetspecError(f"no .ds files in {', '.join(map(str, args.files))}")
    readers: list[StreamReader] = []
    records = read_streams(paths, readers)
    if args.match:
        # The stream's own records (losses above all) are never filtered out.
        records = (r for r in records
                   if r.entity.group == "DS" or selects(args.match, r.entity.full_name))
    try:
        for line in narrate(readers, records):
            print(line)
    except BrokenPipeError:  # `ns_control dump ... | head`
        sys.stderr.close()
        return EXIT_OK
    warnings = [w for r in readers for w in r.warnings]
    _print_lines([f"warning: {w}" for w in warnings], sys.stderr)
    return EXIT_FAILED if any(r.records_lost for r in readers) else EXIT_OK


def cmd_up_down(args: argparse.Namespace) -> int:
    plan = load(args.file)
    ssh_hosts = [h for h in plan.hosts if h.ssh]
    if not ssh_hosts:
        print(f"{args.file}: no ssh hosts (local hosts get a daemon for each run)")
        return EXIT_OK
    outcome = for_each_host(ssh_hosts, args.command, args.accept_new_host_keys)
    _print_lines(summary.host_lines(outcome))
    return EXIT_FAILED if any(isinstance(r, BaseException) for r in outcome.values()) else EXIT_OK


def cmd_ls(args: argparse.Namespace) -> int:
    _print_lines(summary.list_lines(list_runs(args.runs)))
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    path = find_run(args.runs, args.run)
    _print_lines(summary.run_lines(path, load_record(path)))
    return EXIT_OK


def _print_lines(lines: list[str], stream=None) -> None:
    print("\n".join(lines), file=stream or sys.stdout)


COMMANDS = {"run": cmd_run, "check": cmd_check, "dump": cmd_dump, "ls": cmd_ls, "show": cmd_show,
            "up": cmd_up_down, "down": cmd_up_down, "fetch": cmd_fetch, "results": cmd_results,
            "report": cmd_report}


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        return COMMANDS[args.command](args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NetspecError as exc:
        if args.debug:
            traceback.print_exc()
        _print_lines(summary.error_lines(exc), sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
