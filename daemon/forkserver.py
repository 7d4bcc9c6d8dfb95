"""Many local daemons from one pre-loaded process (`python -m netspec.daemon.forkserver`).

A controller that runs hundreds of local hosts would otherwise start as many Pythons, each
importing the daemon anew (a quarter of a second of CPU each, and its own copy of every
module in memory). This process imports the daemon once, freezes what it holds out of the
garbage collector's reach (so the children's reads do not copy the pages), and forks a
daemon per request: milliseconds each, the modules shared copy-on-write.

Lines on stdin, one JSON object each: {"tag": T, "argv": [netspecd's arguments], "log": path}.
Lines on stdout, one JSON object each, written whole by one write(2):
    {"tag": T, "pid": P}                    forked (or {"tag": T, "error": "..."})
    {"port": N, "pid": P}                   the daemon's own announce, once it listens
    {"exited": P, "returncode": R}          a daemon ended (reaped here: its parent)
It ends at the end of stdin; the daemons it forked go on (each watches its controller).
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import sys
import threading
import traceback

from netspec.daemon import main as daemon_main
from netspec.daemon.facts import host_facts


def _say(message: dict[str, object]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def _reap(signum: int = 0, frame: object = None) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _say({"exited": pid, "returncode": os.waitstatus_to_exitcode(status)})


def _child(argv: list[str], log: str) -> None:
    """Become the daemon: never returns into the server's loop."""
    code = 1
    try:
        os.setsid()  # a Ctrl-C at the terminal reaches the controller alone
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), 2)
        code = daemon_main.main(argv)
    except SystemExit as exc:  # argparse's refusal: it has said why on stderr
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # the child must reach _exit whatever happens
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    if threading.active_count() != 1:
        raise SystemExit("netspecd fork server: a thread is running; forking now would copy it half-done")
    # What every daemon would otherwise find for itself, each in pages of its own: the
    # host's facts (their search reads every installed distribution) and its argument parser.
    # Before the reaper is installed: platform runs `uname -p`, whose end is not a daemon's.
    host_facts()
    daemon_main.parse_arguments([])
    importlib.import_module("concurrent.futures.thread")  # asyncio's executor, at a run's setup
    signal.signal(signal.SIGCHLD, _reap)
    gc.collect()
    gc.freeze()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            pid = os.fork()
        except OSError as exc:
            _say({"tag": request["tag"], "error": f"fork failed: {exc.strerror}"})
            continue
        if pid == 0:
            _child([str(a) for a in request["argv"]], str(request["log"]))
        _say({"tag": request["tag"], "pid": pid})
    _reap()


if __name__ == "__main__":
    serve()
