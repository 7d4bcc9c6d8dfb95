"""`ns_control init [DIR]`: write a commented starter experiment (experiment.yaml) and the
NETSPEC-aware program it runs (echo.py) into a directory, refusing to overwrite either.
The files are strings here, so an installed netspec writes them as a checkout does; the
first tutorial's marked example runs them as written (tests/docs/test_examples.py), and
tests/controller/cli/test_init_command.py holds init's refusals."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

EXPERIMENT = """\
# A starter experiment, written by `ns_control init`. Run it from this directory:
#     ns_control run experiment.yaml
# then `ns_control show` (what happened) and `ns_control report` (the figures).
# Every key is in the manual's Reference: the experiment file (reference/experiment-file.md);
# this one is walked through in Tutorials: your first experiment (tutorials/first-experiment.md).
# Check an edit before running it: `ns_control check experiment.yaml`.

experiment: starter             # the name: runs land in runs/starter/<UTC time>-<id>/
description: round trips of small messages from a client on host b to a server on host a

hosts:                          # logical name -> where its daemon (netspecd) runs
  a: {}                         # {} = a netspecd started on this machine for the run
  b: {}                         # ssh: and docker: hosts: tutorials/ssh-hosts.md, docker-hosts.md

components:                     # the programs, each on a host
  server:
    host: a
    program: echo.py            # NETSPEC-aware (uses netspec.nodelib), beside this file
    args: [--role, server]      # its command line
  client:
    host: b
    program: echo.py
    args: [--role, client]
    params: {count: 2000, size: 64}  # ctx.params in its phases (how-to/instrument.md)
  # A plain program takes `command:` instead of `program:` ("exec stress-ng --cpu 1"),
  # started at `start:` and, with `stop:`, sent SIGTERM at that step.

services:
  clksync: {reference: a}       # measure each host's clock against a's: the global timeline
                                # every record is merged onto (explanations/timeline.md)
  camp: {interval_ms: 10}       # CPU, memory, network of each host and component, sampled at
                                # random instants (explanations/sampling.md)

streams:                        # what is logged: nothing is unless a stream enables it
  echo: {enable: [ECHO]}        # every entity of group ECHO that echo.py declares

analysis:
  pairs:                        # a record on one host matched with one on another by its tag:
    one_way: {start: ECHO/send, end: ECHO/received}   # client (b) -> server (a), one way
                                # (how-to/pair-events.md)

schedule:                       # the steps in order, each a barrier: no host enters a step
                                # before every participant acked the one before
                                # (explanations/phases.md)
  - launch                      # start every component on its host
  - sync_clocks                 # wait until every host's clock is measured
  - start_logging               # open the streams
  - {phase: listen, components: [server], deadline: 10s}   # listen() of echo.py, on server only
  - {phase: run, components: [client], deadline: 30s}      # run(), on client; fails if not done in 30 s
  - stop_logging                # close the streams
  - collect                     # end the programs, gather their outputs and streams
"""

PROGRAM = """\
\"\"\"A NETSPEC-aware program, written by `ns_control init`: one file for both roles of
experiment.yaml. The server listens in phase `listen` and publishes its port; the client,
in phase `run`, says the messages' size, sends `count` messages of `size` bytes one at a
time and times each round trip. Both log what they do to their streams (group ECHO),
tagged with the message's number, so the merge can pair the client's send with the
server's receipt across hosts.
More in the manual: How-to guides: instrument a program (how-to/instrument.md).
\"\"\"

import argparse
import socket
import statistics
import threading
import time

from netspec import nodelib

# Entities: declared once (group, name, description), logged anywhere. A stream of
# experiment.yaml enables them (`echo: {enable: [ECHO]}`); a disabled one costs ~20 ns.
SEND = nodelib.event("ECHO", "send", "the client sends a message")
RECEIVED = nodelib.event("ECHO", "received", "the server has read a whole message")
RTT = nodelib.interval("ECHO", "rtt", "a round trip, from the client's send to its echo read back")


def serve(sock):
    while True:                                  # a client a connection, each its own thread
        conn, _ = sock.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()


def echo(conn):
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        size = int.from_bytes(conn.recv(8, socket.MSG_WAITALL), "big")   # the client says it first
        while size >= 8:
            message = conn.recv(size, socket.MSG_WAITALL)   # a whole message, or the end
            if len(message) < size:
                return
            RECEIVED.log(int.from_bytes(message[:8], "big"))   # tag: the message's number
            conn.sendall(message)


def listen(ctx):
    \"\"\"Phase `listen` (the server): listen where other hosts reach this one, publish it.\"\"\"
    sock = socket.create_server((ctx.host_address, 0))
    address, port = sock.getsockname()[:2]
    threading.Thread(target=serve, args=(sock,), daemon=True).start()
    ctx.publish(address=address, port=port)      # ctx.lookup() finds it in later phases
    return f"listening on {address}:{port}"      # the ack's message, shown by the run


def run(ctx):
    \"\"\"Phase `run` (the client): `count` round trips to the server, each an interval.\"\"\"
    count, size = int(ctx.params["count"]), max(8, int(ctx.params["size"]))
    server = (ctx.lookup("server", "address"), ctx.lookup("server", "port"))
    padding = bytes(size - 8)
    rtts = []
    with socket.create_connection(server) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(size.to_bytes(8, "big"))  # the size of the messages to come
        for seq in range(count):
            SEND.log(seq)                          # an event, tagged with the message's number
            RTT.start()                            # an interval: start ... end
            t0 = time.perf_counter_ns()
            conn.sendall(seq.to_bytes(8, "big") + padding)
            if len(conn.recv(size, socket.MSG_WAITALL)) < size:
                raise ConnectionError("the server closed the connection")
            rtts.append(time.perf_counter_ns() - t0)
            RTT.end(seq)
    median_us = statistics.median(rtts) / 1e3
    return f"{count} round trips, median {median_us:.1f} us"   # the ack's message


def main():
    role = argparse.ArgumentParser()
    role.add_argument("--role", choices=["server", "client"], required=True)
    if role.parse_args().role == "server":
        nodelib.register("listen", listen)       # a callback for the step named `listen`
    else:
        nodelib.register("run", run)
    nodelib.run()                                # hand control to netspec until collect


if __name__ == "__main__":
    main()
"""

FILES = {"experiment.yaml": EXPERIMENT, "echo.py": PROGRAM}


def add_parser(command: Any) -> None:
    said = ("write a commented starter experiment (experiment.yaml) and the program it runs (echo.py) "
            "into DIR, for `ns_control run experiment.yaml`; never overwrites")
    init = command("init", help=said, description=f"{said[0].upper()}{said[1:]}. The manual's first "
                   "tutorial (tutorials/first-experiment.md) walks through them.")
    init.add_argument("dir", nargs="?", type=Path, default=Path("."), metavar="DIR",
                      help="where to write them (default: here; made if missing)")


def cmd_init(args: argparse.Namespace) -> int:
    """Write FILES into args.dir, or nothing if any of them is there already (named)."""
    from netspec.protocol.runoutcome import EXIT_FAILED

    targets = {args.dir / name: text for name, text in FILES.items()}
    there = [path for path in targets if path.exists() or path.is_symlink()]
    if there:
        for path in there:
            print(f"error: {path}: exists; ns_control init overwrites nothing (nothing written)",
                  file=sys.stderr)
        return EXIT_FAILED
    args.dir.mkdir(parents=True, exist_ok=True)
    for path, text in targets.items():
        with open(path, "x") as out:  # "x": a file made meanwhile is not overwritten either
            out.write(text)
        print(f"wrote {path}")
    here = "" if args.dir.resolve() == Path.cwd().resolve() else f"cd {args.dir} && "
    print(f"next: {here}ns_control run experiment.yaml")
    return 0
