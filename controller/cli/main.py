"""`ns_control`: arguments, exit codes and printing; the work happens elsewhere."""

from __future__ import annotations

import argparse
import functools
import os
import sys
import traceback
from importlib import resources
from pathlib import Path
from typing import IO

import rich.console
import rich.progress
from netspec.analysis.usercode import UserCode
from netspec.protocol.errors import ConfigError, ConfigErrors, ConnectionLost, NetspecError
from netspec.protocol.messages import PRIVATE_UMASK, netspec_version
from netspec.protocol.runrecord import load_record
from netspec.web import DEFAULT_PORT

from ..engine import summary
from ..engine.failures import Unreachable
from ..engine.runner import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    MergeInterrupted,
    RunOptions,
    merge,
    run_plan,
)
from ..engine.summary import LISTED_OK
from ..experiment.campaignfile import CAMPAIGNS
from ..experiment.load import load, parse
from ..record.rundir import find_run, list_runs, settle

# A command imports what only it uses in its own body: ns_control's start is every command's
# latency, and the merge's libraries (numpy, pyarrow, DuckDB), the campaign's statistics and
# SSH's paramiko take about a second to import between them.


class Terminal:
    """runner.Output for people: progress and results on stdout, errors on stderr. On a
    terminal, bringing up and gathering a fleet of more than a few hosts shows a bar."""

    def __init__(self, stdout: IO[str] | None = None, bars: bool | None = None):
        self.stdout = stdout
        self.bars = bars
        self.bar: rich.progress.Progress | None = None
        self.task = rich.progress.TaskID(0)
        self.line_open = False

    def out(self, text: str, end: bool = True) -> None:
        print(text, end="\n" if end else "", flush=True, file=self.stdout or sys.stdout)
        self.line_open = not end and (bool(text) or self.line_open)

    def err(self, lines: list[str]) -> None:
        print_lines(lines, sys.stderr)

    def count(self, what: str, done: int, total: int) -> None:
        stdout = self.stdout or sys.stdout
        if total <= LISTED_OK or not (stdout.isatty() if self.bars is None else self.bars):
            return
        if self.bar is None:
            if self.line_open:  # the bar takes lines of its own
                self.out("")
            self.bar = rich.progress.Progress(
                rich.progress.TextColumn("  {task.description:<14}"), rich.progress.BarColumn(),
                rich.progress.MofNCompleteColumn(), rich.progress.TimeElapsedColumn(),
                console=rich.console.Console(file=stdout, force_terminal=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(f"{what} hosts", total=total)
        self.bar.update(self.task, completed=done)
        if done >= total:
            self.bar.stop()
            self.bar = None


TERMINAL = Terminal()


def print_lines(lines: list[str], stream: IO[str] | None = None) -> None:
    if lines:
        print("\n".join(lines), file=stream or sys.stdout, flush=True)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ns_control",
                                     description="Run distributed experiments in phases.")
    parser.add_argument("--version", action="version", version=f"netspec {netspec_version()}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    # --debug is taken after the subcommand too; SUPPRESS keeps one given before it.
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    command = functools.partial(sub.add_parser, parents=[debug])
    run = command("run", help="run an experiment file")
    run.add_argument("file", type=Path)
    run.add_argument("--keep-daemons", action="store_true",
                     help="leave the daemons of ssh hosts running (stop them with `down`)")
    demo = command("demo", help="run the bundled demo experiment (stimulus-response on two local daemons)")
    up = command("up", help="start the daemons of a file's ssh hosts, to outlive runs")
    up.add_argument("file", type=Path)
    down = command("down", help="stop the daemons `up` or --keep-daemons left")
    down.add_argument("file", type=Path)
    for p in (run, demo):
        p.add_argument("--quiet", "-q", action="store_true", help="print only errors")
    run.add_argument("--no-merge", action="store_true",
                     help="leave the streams unmerged (`fetch` merges them later); not for a campaign")
    for p in (run, up, down):
        p.add_argument("--accept-new-host-keys", action="store_true",
                       help="trust ssh host keys seen for the first time (added to known_hosts)")
    check = command("check", help="validate an experiment file")
    check.add_argument("file", type=Path)
    dump = command("dump", help="narrate datastream files (a directory: every .ds in it)")
    dump.add_argument("files", type=Path, nargs="+")
    dump.add_argument("--match", action="append", default=[], metavar="PATTERN",
                      help="only entities matching GROUP/name (wildcards; repeatable)")
    dump.add_argument("--decoder", action="append", default=[], metavar="MODULE:FUNCTION",
                      help="allow this decoder a stream names (your own code: it runs; repeatable); "
                           "a stream's own MODULE:FUNCTION is never imported otherwise")
    ls = command("ls", help="list runs")
    show = command("show", help="summarise a run")
    show.add_argument("run", nargs="?", default="latest")
    show.add_argument("--host", metavar="HOST", help="that host's whole detail (a large fleet's summary "
                      "counts the hosts that did well)")
    fetch = command("fetch", help="merge a run's streams (again) into a result set; --from "
                                         "copies the run from another controller host first")
    fetch.add_argument("run", nargs="?", default="latest")
    fetch.add_argument("--from", dest="source", metavar="[USER@]HOST[:RUNS]",
                       help="the controller host that ran it (over SSH), and its runs directory")
    fetch.add_argument("--to", type=Path, metavar="DIR", help="write the result set here, not in RUN/merged")
    fetch.add_argument("--accept-new-host-keys", action="store_true",
                       help="trust the --from host's ssh key if seen for the first time")
    user_code_options(fetch)
    collect = command("collect", help="gather what a run whose controller was killed left on its hosts, "
                                      "then merge it")
    collect.add_argument("run", nargs="?", default="latest")
    collect.add_argument("--accept-new-host-keys", action="store_true",
                         help="trust ssh host keys seen for the first time (added to known_hosts)")
    user_code_options(collect)
    export = command("export", help="write a run as one archive with RO-Crate metadata (mail, archives)")
    export.add_argument("run", nargs="?", default="latest")
    export.add_argument("--to", type=Path, required=True, metavar="FILE",
                        help="the archive to write (.tar.gz)")
    import_ = command("import", help="bring an exported run back under the runs directory")
    import_.add_argument("file", type=Path)
    results = command("results", help="list merged result sets with their size and status")
    report = command("report", help="statistics of runs' metrics (Getstats), the first run the "
                                           "baseline of the others; or of a campaign's points, with plots")
    report.add_argument("run_refs", nargs="*", default=["latest"], metavar="RUN|CAMPAIGN")
    report.add_argument("--csv", type=Path, metavar="FILE", help="also write the table as CSV")
    user_code_options(report)  # a run of an older netspec is merged again first
    resume = command("resume", help="go on with a campaign that was stopped or killed")
    resume.add_argument("campaign")
    rerun = command("rerun", help="run a past run again from its run directory alone")
    rerun.add_argument("run")
    for p in (run, resume, rerun):
        p.add_argument("--share-hosts", action="store_true",
                       help="run on hosts whose daemons hold another run (refused otherwise, naming it)")
    for p in (resume, rerun):
        p.add_argument("--quiet", "-q", action="store_true", help="print only errors")
        p.add_argument("--accept-new-host-keys", action="store_true",
                       help="trust ssh host keys seen for the first time (added to known_hosts)")
    serve = command("serve", help="browse the runs and campaigns in a web page (127.0.0.1 only by default)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT,
                       help=f"port (default {DEFAULT_PORT}; 0 picks a free one)")
    serve.add_argument("--open", action="store_true", help="open the page in this machine's browser")
    for p in (run, resume, report, serve):
        p.add_argument("--campaigns", type=Path, help=f"campaigns directory (default RUNS/{CAMPAIGNS})")
    for p in (run, demo, ls, show, fetch, collect, export, import_, results, report, resume, rerun,
              serve):
        p.add_argument("--runs", type=Path, default=Path("runs"), help="runs directory")
    args = parser.parse_args(argv)
    if "campaigns" in args and args.campaigns is None:  # one root: the campaigns under the runs
        args.campaigns = args.runs / CAMPAIGNS
    return args


def cmd_run(args: argparse.Namespace) -> int:
    plan = load(args.file)
    if plan.campaign is not None:
        if args.no_merge:
            raise NetspecError(f"{args.file}: a campaign's repeat and report need each run merged: "
                               "--no-merge applies to a single run")
        from ..campaigns.campaign import CampaignDir, Campaigner

        return Campaigner(CampaignDir.create(args.campaigns, plan), _options(args)).run()
    _, code = run_plan(plan, _options(args))
    return code


def cmd_demo(args: argparse.Namespace) -> int:
    """The demo from the installed package: works the same from a checkout, a wheel or pipx."""
    demo = resources.files("netspec.experiments").joinpath("stimulus_response", "stimulus_response.yaml")
    with resources.as_file(demo) as path:
        _, code = run_plan(load(path), _options(args))
    return code


def _options(args: argparse.Namespace) -> RunOptions:
    return RunOptions(args.runs, args.quiet, getattr(args, "accept_new_host_keys", False),
                      getattr(args, "keep_daemons", False), TERMINAL, not getattr(args, "no_merge", False),
                      getattr(args, "share_hosts", False))


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


def cmd_fetch(args: argparse.Namespace) -> int:
    from netspec.analysis.resultset import MERGED

    from ..gather.pull import pull_run

    if args.source:
        path = pull_run(args.source, args.run, args.runs, args.accept_new_host_keys)
        print(f"fetched {path.name} from {args.source} into {path}")
    else:
        path = find_run(args.runs, args.run)
    merged = merge(path, TERMINAL, args.to, user_code(args))
    print_lines(merged.lines)
    if merged.ok:
        print_lines(summary.written_lines(args.to or path / MERGED))
    return EXIT_OK if merged.ok else EXIT_FAILED


def cmd_collect(args: argparse.Namespace) -> int:
    from ..gather.collect import collect_run

    path = find_run(args.runs, args.run)
    found = collect_run(path, args.accept_new_host_keys)
    if not found:
        print("no host of this run was reached: nothing to collect")
        return EXIT_OK
    print_lines([f"host {host}: {salvaged.summary()}" for host, salvaged in found.items()])
    merged = merge(path, TERMINAL, code=user_code(args))
    print_lines(merged.lines)
    failed = [host for host, salvaged in found.items() if salvaged.error]
    return EXIT_FAILED if failed or not merged.ok else EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    from ..gather.bundle import CRATE, export_run

    path = export_run(find_run(args.runs, args.run), args.to)
    print(f"exported {path} ({path.stat().st_size / 1e6:.1f} MB, with {CRATE})")
    return EXIT_OK


def cmd_import(args: argparse.Namespace) -> int:
    from ..gather.bundle import import_run

    path = import_run(args.file, args.runs)
    print(f"imported {path.name} into {path} (every file checked against its crate's sha256)")
    return EXIT_OK


def cmd_results(args: argparse.Namespace) -> int:
    print_lines(summary.results_lines(list_runs(args.runs)))
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    # scipy takes half a second to import: only the command that needs it pays for it.
    from netspec.analysis.metrics import run_metrics
    from netspec.analysis.report import report_lines, write_csv
    from netspec.analysis.resultset import MERGED, is_current

    from ..campaigns.campaign import CampaignDir, campaign_metrics, plot_points

    campaign = _campaign(args, args.run_refs[0]) if len(args.run_refs) == 1 else None
    if campaign is not None:
        cdir = CampaignDir.open(campaign)
        table = campaign_metrics(cdir)
        plots = plot_points(cdir, table)
        empty = [f"{p['label']}: no counted runs ({len(p['runs'])} run, {p['done'] or 'not done'})"
                 for p in cdir.state["points"] if not table[p["label"]]]
        print_lines([*empty, *report_lines(table), f"plots: {', '.join(str(p) for p in plots)}"])
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
        print_lines([*run_differences(paths), *report_lines(table)])
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


def cmd_resume(args: argparse.Namespace) -> int:
    from ..campaigns.campaign import CampaignDir, Campaigner, find_campaign

    cdir = CampaignDir.open(find_campaign(args.campaigns, args.campaign))
    if cdir.state["status"] == "done":
        print(f"campaign {cdir.state['id']} is done: nothing to resume")
        return EXIT_OK
    return Campaigner(cdir, _options(args)).run()


def cmd_rerun(args: argparse.Namespace) -> int:
    path = find_run(args.runs, args.run)
    record = load_record(path)
    # The run's own copies of its programs stand in for the originals, wherever those are now.
    copies = {source: str((path / kept["copy"]).resolve())
              for source, kept in record.get("programs", {}).items()}
    plan = parse((path / "experiment.yaml").read_text(), Path(record["plan"]["source"]), copies,
                 shown=path.resolve() / "experiment.yaml")
    _, code = run_plan(plan, _options(args), {"rerun_of": record["id"]})
    return code


def cmd_check(args: argparse.Namespace) -> int:
    plan = load(args.file)
    print_lines([f"warning: {w}" for w in plan.warnings], sys.stderr)
    steps = " -> ".join(s.phase for s in plan.schedule)
    print(f"{args.file}: ok: experiment '{plan.name}', {len(plan.hosts)} host(s), "
          f"{len(plan.components)} component(s)\n  schedule: {steps}")
    if plan.campaign is not None:
        c = plan.campaign
        until = f", then until {c.until} (at most {c.max_runs or c.runs})" if c.until else ""
        print(f"  campaign: {len(c.points)} point(s), {c.runs} run(s) each{until}"
              + (f", after {c.warmup} warm-up run(s)" if c.warmup else ""))
    return EXIT_OK


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
            print(line)
    except BrokenPipeError:  # `ns_control dump ... | head`
        sys.stderr.close()
        return EXIT_OK
    finally:
        for reader in readers:
            reader.close()
    warnings = [w for r in readers for w in r.warnings]
    print_lines([f"warning: {w}" for w in warnings], sys.stderr)
    return EXIT_FAILED if any(r.records_lost for r in readers) else EXIT_OK


def cmd_up_down(args: argparse.Namespace) -> int:
    from ..hosts.remote import for_each_host

    plan = load(args.file)
    ssh_hosts = [h for h in plan.hosts if h.ssh]
    if not ssh_hosts:
        print(f"{args.file}: no ssh hosts (local hosts get a daemon for each run)")
        return EXIT_OK
    outcome = for_each_host(ssh_hosts, args.command, args.accept_new_host_keys)
    # A host whose ssh or daemon could not be reached lost no connection: said as a run says it.
    outcome = {h: Unreachable(h, r) if isinstance(r, ConnectionLost) else r for h, r in outcome.items()}
    print_lines(summary.host_lines(outcome))
    return EXIT_FAILED if any(isinstance(r, BaseException) for r in outcome.values()) else EXIT_OK


def cmd_ls(args: argparse.Namespace) -> int:
    print_lines(summary.list_lines(list_runs(args.runs)))
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    path = find_run(args.runs, args.run)
    record = settle(path, load_record(path))
    if args.host is not None and args.host not in record.get("hosts", {}):
        names = sorted(record.get("hosts", {}))
        listed = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
        raise NetspecError(f"run {record['id']} has no host '{args.host}' (its hosts: {listed or 'none'})")
    print_lines(summary.run_lines(path, record, args.host))
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    from netspec.web.serve import serve  # the web stack: only for this command

    serve(args.runs, args.campaigns, args.host, args.port, args.open, lambda line: print(line, flush=True))
    return EXIT_OK


COMMANDS = {"run": cmd_run, "demo": cmd_demo, "check": cmd_check, "dump": cmd_dump, "ls": cmd_ls,
            "show": cmd_show, "up": cmd_up_down, "down": cmd_up_down, "fetch": cmd_fetch,
            "collect": cmd_collect, "export": cmd_export, "import": cmd_import, "results": cmd_results,
            "report": cmd_report, "resume": cmd_resume, "rerun": cmd_rerun,
            "serve": cmd_serve}


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    os.umask(PRIVATE_UMASK)  # run directories 0700, their files 0600: a run is its owner's
    try:
        return COMMANDS[args.command](args)
    except ConfigError as exc:
        errors = exc.errors if isinstance(exc, ConfigErrors) else [exc]
        print_lines([f"error: {e}" for e in errors], sys.stderr)
        if len(errors) > 1:
            print(f"{len(errors)} errors in {exc.file}", file=sys.stderr)
        return EXIT_USAGE
    except NetspecError as exc:
        if args.debug:
            traceback.print_exc()
        print_lines(summary.error_lines(exc), sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt as exc:  # Ctrl-C outside a run's own handling (a merge, a collect)
        if args.debug:
            traceback.print_exc()
        if not isinstance(exc, MergeInterrupted):  # which said what it left, and what to do
            print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
