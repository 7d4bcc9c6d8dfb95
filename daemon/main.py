"""`netspecd`: the per-host daemon's command line."""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import datetime
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

from netspec.protocol.auth import load_or_create_key, netspec_home, read_run_key, take_run_key
from netspec.protocol.errors import NetspecError
from netspec.protocol.messages import PRIVATE_UMASK

from .component import KILL_GRACE_S
from .leftovers import end_left, sweep_dead
from .orphans import adopt_orphans
from .server import Daemon


def parse_listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


@cache
def _parser() -> argparse.ArgumentParser:
    """Built once: a fork server builds it before it forks, so its daemons share it."""
    parser = argparse.ArgumentParser(
        prog="netspecd", description="The per-host netspec daemon: runs the components of "
        "experiments for ns_control. Every connection must first prove the shared key.")
    parser.add_argument("--listen", default="127.0.0.1:7420", type=parse_listen,
                        help="address:port to listen on (port 0 picks a free one)")
    parser.add_argument("--root", type=Path, default=None,
                        help="where component work directories go")
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("--key", type=Path, default=None, help="shared key file")
    keys.add_argument("--run-key", type=Path, default=None, metavar="FILE",
                      help="a key for one run (a container's, or with - the first line of stdin: an "
                           "SSH host's): read, then the file removed, and this process made undumpable, "
                           "so that the programs it runs cannot read the key")
    parser.add_argument("--only-run", metavar="RUN_ID", default=None,
                        help="set up no run but this one (a daemon started for one run)")
    parser.add_argument("--announce", action="store_true",
                        help="print one JSON line with the port once listening")
    parser.add_argument("--parent-pid", type=int, default=None,
                        help="stop (killing every component) when this process ends")
    parser.add_argument("--lifeline", action="store_true",
                        help="stop when stdin closes (started over SSH for one run)")
    parser.add_argument("--state-file", type=Path, default=None,
                        help="write {port, pid} here once listening; removed at exit")
    parser.add_argument("--kill-run", metavar="RUN_ID", default=None,
                        help="end every process left by that run (SIGTERM, then SIGKILL) and remove its link "
                             "conditions (its nftables table, iptables chain, htb qdiscs), then exit")
    parser.add_argument("--host", default="",
                        help="with --kill-run: only the processes of this host of the run")
    parser.add_argument("--verbose", "-v", action="store_true")
    return parser


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    return _parser().parse_args(argv)


async def _serve(args: argparse.Namespace, key: bytes, root: Path) -> None:
    daemon = Daemon(key, root, only_run=args.only_run)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, daemon.stop)
    watched: list[int] = []  # fds the loop watches, each removed (and a pidfd closed) at the end
    if args.parent_pid:
        # A pidfd becomes readable when the process ends: no polling needed.
        pidfd = os.pidfd_open(args.parent_pid)
        loop.add_reader(pidfd, daemon.stop)
        watched.append(pidfd)
    if args.lifeline:
        if _watch_lifeline(loop, daemon.stop):
            watched.append(0)
        else:
            daemon.stop()  # at its end already: a file or /dev/null, which epoll refuses

    def ready(port: int) -> None:
        state = {"port": port, "pid": os.getpid()}
        if args.announce:
            # One write(2) of the whole line: daemons forked by one fork server share its
            # stdout, and a line split in two writes could be cut by another's.
            os.write(sys.stdout.fileno(), (json.dumps(state) + "\n").encode())
            # Nothing else is said there, and the pipe is the fork server's, which the controller
            # waits to see closed when it ends it: held by a daemon left to end its run alone
            # (after a second Ctrl-C), it kept the controller waiting out the server's grace.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        if args.state_file:
            partial = args.state_file.with_name(args.state_file.name + ".part")
            partial.write_text(json.dumps(state))
            partial.replace(args.state_file)
        logging.getLogger("netspecd").info("listening on %s:%d", args.listen[0], port)

    try:
        await daemon.serve(args.listen[0], args.listen[1], ready)
    finally:
        for fd in watched:
            loop.remove_reader(fd)
            if fd:
                os.close(fd)
        if args.state_file:
            args.state_file.unlink(missing_ok=True)


def _watch_lifeline(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> bool:
    """Call `stop` once stdin ends (the SSH channel or connection is gone), watched by the
    loop: no thread to own. False if epoll refuses stdin (a regular file, /dev/null): then
    it was read to its end here, which for such a file is at once."""
    def readable() -> None:
        try:
            data = os.read(0, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(0)
            stop()
    try:
        loop.add_reader(0, readable)
    except PermissionError:
        while os.read(0, 4096):
            pass
        return False
    return True


PR_SET_DUMPABLE = 4


def undumpable() -> None:
    """This process's memory, environment and descriptors closed to its own user's other
    processes (/proc/PID/mem, environ, ptrace need CAP_SYS_PTRACE then, which a container's
    root lacks by default): the key for the run is in its memory. A component's execve makes
    it dumpable again, so this covers the daemon and what it forks, not the programs.

    Raises:
        NetspecError: the kernel refused.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise NetspecError(f"prctl(PR_SET_DUMPABLE, 0) failed: {os.strerror(ctypes.get_errno())}")


class _UTCTime(logging.Formatter):
    """A line's time in ISO 8601, UTC, to the microsecond: the wall clock the run's records
    keep, so that a line of netspecd.log can be put beside the run's events."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        when = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        return when.isoformat(timespec="microseconds").replace("+00:00", "Z")


def log_to_stderr(verbose: bool) -> None:
    """netspecd's log (its stderr: netspecd.log in the run's directory), each line with its
    time; Python's warnings too, which would otherwise be written there without one."""
    handler = logging.StreamHandler()
    handler.setFormatter(_UTCTime("%(asctime)s netspecd[%(process)d] %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    logging.captureWarnings(True)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    if args.kill_run:
        # Its processes (a paused one resumed to take its SIGTERM) and its link conditions,
        # found by the run's names: a daemon killed hard left them.
        for said in end_left(args.kill_run, args.host, KILL_GRACE_S):
            print(f"netspecd: {said}", file=sys.stderr)
        return 0
    # A run's outputs and streams are its owner's: private by default (0700 / 0600), also
    # for the components, which inherit the mask.
    os.umask(PRIVATE_UMASK)
    log_to_stderr(args.verbose)
    if not adopt_orphans():
        logging.getLogger("netspecd").warning("not a child subreaper: each reset scans every process")
    root = args.root or netspec_home() / "daemon"
    # What a run of a daemon that died hard here left (its record on disk: leftovers.py),
    # ended before anything new starts.
    for said in sweep_dead(root, KILL_GRACE_S):
        logging.getLogger("netspecd").warning("%s", said)
    try:
        if args.run_key:
            key = read_run_key(0) if str(args.run_key) == "-" else take_run_key(args.run_key)
            undumpable()
        else:
            key = load_or_create_key(args.key)
        asyncio.run(_serve(args, key, root))
    except Exception as exc:
        # The listening socket is made inside the connections' task group, which raises its
        # failure as a group of one.
        cause = exc.exceptions[0] if isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1 else exc
        if isinstance(cause, NetspecError):
            logging.getLogger("netspecd").error("%s", cause)
        elif isinstance(cause, OSError) and cause.errno:
            logging.getLogger("netspecd").error("cannot listen on %s:%d: %s", *args.listen,
                                                os.strerror(cause.errno))
        else:
            raise
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
