"""Logs numbered events into a stream outside netspecd, then misbehaves as told.

    streamer.py DIR COUNT THEN [--chunk K] [--flush-ms F] [--ring N]

THEN: exit (return normally), sleep (wait to be signalled), fork (a child logs too).
Prints "logged COUNT" once the events are logged.
"""

import argparse
import os
import sys
import time
from pathlib import Path

from netspec.datastream.writer import StreamConfig, StreamInfo
from netspec.nodelib import instrument

parser = argparse.ArgumentParser()
parser.add_argument("dir", type=Path)
parser.add_argument("count", type=int)
parser.add_argument("then", choices=["exit", "sleep", "fork"])
parser.add_argument("--chunk", type=int, default=100)
parser.add_argument("--flush-ms", type=int, default=60_000)
parser.add_argument("--ring", type=int, default=0)
args = parser.parse_args()

ds = instrument.default
tick = ds.event("TEST", "tick")
ds.start([StreamConfig("app", enable=("TEST",), chunk_records=args.chunk, flush_ms=args.flush_ms,
                       ring_chunks=args.ring)], StreamInfo(args.dir, run="r", host="h", component="streamer"))
for i in range(args.count):
    tick.log(i)
print("logged", args.count, flush=True)

if args.then == "sleep":
    while True:
        time.sleep(1)
elif args.then == "fork":
    pid = os.fork()
    if pid == 0:
        for i in range(args.count):
            tick.log(1_000_000 + i)
        sys.exit(0)
    os.waitpid(pid, 0)
    tick.log(-1)
