"""`netspecd`: the per-host daemon's command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import threading
from functools import cache
from pathlib import Path

from netspec.protocol.auth import load_or_create_key, netspec_home
from netspec.protocol.errors import NetspecError
from netspec.protocol.exits import end_run_processes
from netspec.protocol.messages import PRIVATE_UMASK

from .component import KILL_GRACE_S
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
    parser.add_argument("--key", type=Path, default=None, help="shared key file")
    parser.add_argument("--announce", action="store_true",
                        help="print one JSON line with the port once listening")
    parser.add_argument("--parent-pid", type=int, default=None,
                        help="stop (killing every component) when this process ends")
    parser.add_argument("--lifeline", action="store_true",
                        help="stop when stdin closes (started over SSH for one run)")
    parser.add_argument("--state-file", type=Path, default=None,
                        help="write {port, pid} here once listening; removed at exit")
    parser.add_argument("--kill-run", metavar="RUN_ID", default=None,
                        help="end every process left by that run (SIGTERM, then SIGKILL), then exit")
    parser.add_argument("--host", default="",
                        help="with --kill-run: only the processes of this host of the run")
    parser.add_argument("--verbose", "-v", action="store_true")
    return parser


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    return _parser().parse_args(argv)


async def _serve(args: argparse.Namespace, key: bytes) -> None:
    daemon = Daemon(key, args.root or netspec_home() / "daemon")
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, daemon.stop)
    if args.parent_pid:
        # A pidfd becomes readable when the process ends: no polling needed.
        pidfd = os.pidfd_open(args.parent_pid)
        loop.add_reader(pidfd, daemon.stop)
    if args.lifeline:
        # A thread, not add_reader: stdin may be something epoll refuses, such as a file.
        def watch_stdin() -> None:
            while os.read(0, 4096):
                pass
            loop.call_soon_threadsafe(daemon.stop)  # EOF: the SSH channel or connection is gone
        threading.Thread(target=watch_stdin, name="lifeline", daemon=True).start()

    def ready(port: int) -> None:
        state = {"port": port, "pid": os.getpid()}
        if args.announce:
            # One write(2) of the whole line: daemons forked by one fork server share its
            # stdout, and a line split in two writes could be cut by another's.
            os.write(sys.stdout.fileno(), (json.dumps(state) + "\n").encode())
        if args.state_file:
            partial = args.state_file.with_name(args.state_file.name + ".part")
            partial.write_text(json.dumps(state))
            partial.replace(args.state_file)
        logging.getLogger("netspecd").info("listening on %s:%d", args.listen[0], port)

    try:
        await daemon.serve(args.listen[0], args.listen[1], ready)
    finally:
        if args.state_file:
            args.state_file.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    if args.kill_run:
        end_run_processes(args.kill_run, KILL_GRACE_S, args.host)
        return 0
    # A run's outputs and streams are its owner's: private by default (0700 / 0600), also
    # for the components, which inherit the mask.
    os.umask(PRIVATE_UMASK)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="netspecd[%(process)d] %(levelname)s %(message)s")
    if not adopt_orphans():
        logging.getLogger("netspecd").warning("not a child subreaper: each reset scans every process")
    try:
        key = load_or_create_key(args.key)
        asyncio.run(_serve(args, key))
    except NetspecError as exc:
        print(f"netspecd: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"netspecd: cannot listen on {args.listen[0]}:{args.listen[1]}: {exc.strerror}",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
