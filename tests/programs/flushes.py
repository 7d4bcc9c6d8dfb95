"""Opens streams one after the other, each of its own flush_ms, logs one record into each,
then waits to be killed: for the flush tests, in a process whose flusher started with these
streams and no other.

    flushes.py DIR NAME:FLUSH_MS [NAME:FLUSH_MS ...] [--apart-ms A]

Stream NAME logs entity T/NAME (tag 1). The streams open in the order given, A ms apart
(the later ones open beside the earlier); prints "logged" once every stream has its record.
"""

import argparse
import time
from pathlib import Path

from netspec.datastream.instrument import Datastreams
from netspec.datastream.writer import StreamConfig, StreamInfo

parser = argparse.ArgumentParser()
parser.add_argument("dir", type=Path)
parser.add_argument("streams", nargs="+")
parser.add_argument("--apart-ms", type=float, default=0)
args = parser.parse_args()

opened = []
for i, spec in enumerate(args.streams):
    name, flush_ms = spec.split(":")
    if i and args.apart_ms:
        time.sleep(args.apart_ms / 1000)  # the scenario: a stream opened a while after another
    ds = Datastreams()
    entity = ds.event("T", name)
    ds.start([StreamConfig(name, enable=(f"T/{name}",), flush_ms=int(flush_ms))],
             StreamInfo(args.dir, run="r", host="h", component="c"), exit_hooks=False)
    opened.append((ds, entity))
for _, entity in opened:
    entity.log(1)
print("logged", flush=True)
while True:
    time.sleep(1)
