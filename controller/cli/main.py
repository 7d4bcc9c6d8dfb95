"""`ns_control`: its arguments, the command each runs, and the exit code of its errors; the
commands are in running.py (what runs something) and runs.py (what reads runs), what they
print goes through terminal.py, and the work happens elsewhere."""

from __future__ import annotations

import argparse
import functools
import os
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from netspec.protocol.errors import ConfigError, ConfigErrors, NetspecError
from netspec.protocol.messages import PRIVATE_UMASK, netspec_version
from netspec.protocol.runoutcome import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_PIPE, EXIT_USAGE
from netspec.web import DEFAULT_PORT

from ..engine import summary
from ..engine.runner import MergeInterrupted
from ..engine.terminal import print_lines, printable, quiet_stdout, reader_gone
from ..experiment.campaignfile import CAMPAIGNS
from . import images, manual, running, runs, starter

if TYPE_CHECKING:
    from .reference import DocumentedParser

RUN_HELP = "a run: its directory, `latest`, or a suffix of its id under --runs"


def parser() -> DocumentedParser:
    """`ns_control`'s arguments: every command, and every argument with its help (the
    manual's commands page is made of it, and refuses an argument without one)."""
    from .reference import DocumentedParser  # what the commands page reads of it

    parser = DocumentedParser(prog="ns_control", description="Run distributed experiments in phases.",
                              epilog=manual.EPILOG)
    parser.add_argument("--version", action="version", version=f"netspec {netspec_version()}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    add_command = parser.add_commands(dest="command", required=True)
    # --debug is taken after the subcommand too; SUPPRESS keeps one given before it.
    debug = DocumentedParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks")
    command = functools.partial(add_command, parents=[debug])
    run = command("run", help="run an experiment file", epilog=manual.epilog("reference/experiment-file",
                                                                                 "reference/exit-codes"))
    run.add_argument("file", type=Path, help="the experiment file (a campaign's: every point)")
    run.add_argument("--keep-daemons", action="store_true",
                     help="leave the daemons of ssh hosts running (stop them with `down`), and docker hosts' "
                          "containers and network")
    demo = command("demo", help="run the bundled demo experiment (stimulus-response on two local daemons)")
    up = command("up", help="start the daemons of a file's ssh hosts, to outlive runs")
    up.add_argument("file", type=Path, help="the experiment file whose ssh hosts to start")
    down = command("down", help="stop the daemons `up` or --keep-daemons left")
    down.add_argument("file", type=Path, help="the experiment file whose ssh hosts to stop")
    for p in (run, demo):
        p.add_argument("--quiet", "-q", action="store_true", help="print only errors")
    run.add_argument("--no-merge", action="store_true",
                     help="leave the streams unmerged (`fetch` merges them later); not for a campaign")
    for p in (run, up, down):
        p.add_argument("--accept-new-host-keys", action="store_true",
                       help="trust ssh host keys seen for the first time (added to known_hosts)")
    check = command("check", help="validate an experiment file",
                    epilog=manual.epilog("reference/experiment-file"))
    check.add_argument("file", type=Path, help="the experiment file")
    dump = command("dump", help="narrate datastream files (a directory: every .ds in it)",
                   epilog=manual.epilog("stream-format"))
    dump.add_argument("files", type=Path, nargs="+", metavar="FILE",
                      help="a datastream file (.ds), or a directory of them")
    dump.add_argument("--match", action="append", default=[], metavar="PATTERN",
                      help="only entities matching GROUP/name (wildcards; repeatable)")
    dump.add_argument("--decoder", action="append", default=[], metavar="MODULE:FUNCTION",
                      help="allow this decoder a stream names (your own code: it runs; repeatable); "
                           "a stream's own MODULE:FUNCTION is never imported otherwise")
    ls = command("ls", help="list runs")
    show = command("show", help="summarise a run")
    show.add_argument("run", nargs="?", default="latest", help=RUN_HELP)
    show.add_argument("--host", metavar="HOST", help="that host's whole detail (a large fleet's summary "
                      "counts the hosts that did well)")
    fetch = command("fetch", help="merge a run's streams (again) into a result set; --from "
                                  "copies the run from another controller host first",
                    epilog=manual.epilog("results", "how-to/export-import"))
    fetch.add_argument("run", nargs="?", default="latest", help=RUN_HELP)
    fetch.add_argument("--from", dest="source", metavar="[USER@]HOST[:RUNS]",
                       help="the controller host that ran it (over SSH), and its runs directory")
    fetch.add_argument("--to", type=Path, metavar="DIR", help="write the result set here, not in RUN/merged")
    fetch.add_argument("--accept-new-host-keys", action="store_true",
                       help="trust the --from host's ssh key if seen for the first time")
    runs.user_code_options(fetch)
    collect = command("collect", help="gather what a run whose controller was killed left on its hosts, "
                                      "then merge it", epilog=manual.epilog("how-to/salvage-and-collect"))
    collect.add_argument("run", nargs="?", default="latest", help=RUN_HELP)
    collect.add_argument("--accept-new-host-keys", action="store_true",
                         help="trust ssh host keys seen for the first time (added to known_hosts)")
    runs.user_code_options(collect)
    export = command("export", help="write a run as one archive with RO-Crate metadata (mail, archives)",
                     epilog=manual.epilog("how-to/export-import"))
    export.add_argument("run", nargs="?", default="latest", help=RUN_HELP)
    export.add_argument("--to", type=Path, required=True, metavar="FILE",
                        help="the archive to write (.tar.gz)")
    import_ = command("import", help="bring an exported run back under the runs directory",
                      epilog=manual.epilog("how-to/export-import"))
    import_.add_argument("file", type=Path, help="the archive `export` wrote")
    import_.add_argument("--max-size", type=float, default=64, metavar="GB",
                         help="unpack at most this many GB (default 64): a larger run is refused "
                              "before any of it is written")
    results = command("results", help="list merged result sets with their size and status",
                      epilog=manual.epilog("results"))
    report = command("report", help="statistics of runs' metrics (Getstats), the first run the "
                                    "baseline of the others; or of a campaign's points, with plots",
                     epilog=manual.epilog("results", "tutorials/campaign"))
    report.add_argument("run_refs", nargs="*", default=["latest"], metavar="RUN|CAMPAIGN",
                        help="runs (" + RUN_HELP + ") or a campaign (its directory, or a suffix of its id)")
    report.add_argument("--csv", type=Path, metavar="FILE", help="also write the table as CSV")
    runs.user_code_options(report)  # a run of an older netspec is merged again first
    resume = command("resume", help="go on with a campaign that was stopped or killed")
    resume.add_argument("campaign",
                        help="the campaign: its directory, or a suffix of its id under --campaigns")
    rerun = command("rerun", help="run a past run again from its run directory alone")
    rerun.add_argument("run", help=RUN_HELP)
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
    images.add_parser(command)
    starter.add_parser(command)
    manual.add_parser(command, parser)
    return parser


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    args = parser().parse_args(argv)
    if "campaigns" in args and args.campaigns is None:  # one root: the campaigns under the runs
        args.campaigns = args.runs / CAMPAIGNS
    return args



COMMANDS = {"run": running.cmd_run, "demo": running.cmd_demo, "check": running.cmd_check,
            "up": running.cmd_up_down, "down": running.cmd_up_down, "resume": running.cmd_resume,
            "rerun": running.cmd_rerun, "dump": runs.cmd_dump, "ls": runs.cmd_ls, "show": runs.cmd_show,
            "fetch": runs.cmd_fetch, "collect": runs.cmd_collect, "export": runs.cmd_export,
            "import": runs.cmd_import, "results": runs.cmd_results, "report": runs.cmd_report,
            "serve": runs.cmd_serve, "image": images.cmd_image, "docs": manual.cmd_docs,
            "init": starter.cmd_init}


# Commands that write the user's own files (init: the user's program and experiment, source
# to share as any other), with the user's umask.
USERS_OWN = {"init"}


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    if args.command not in USERS_OWN:
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
        if isinstance(exc, BrokenPipeError) and reader_gone(sys.stdout):
            quiet_stdout(sys.stdout)  # stdout's reader went away (`show | head -1`): end there, quietly
            return EXIT_PIPE
        # any other: a socket's or a child's pipe (docker, SSH) is an error, said
        if args.debug:
            traceback.print_exc()
        where = f"{exc.filename}: " if exc.filename else ""  # one that names no file says no empty one
        print(printable(f"error: {where}{exc.strerror or exc}"), file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt as exc:  # Ctrl-C outside a run's own handling (a merge, a collect)
        if args.debug:
            traceback.print_exc()
        if not isinstance(exc, MergeInterrupted):  # which said what it left, and what to do
            print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED



if __name__ == "__main__":
    sys.exit(main())
