"""A component that speaks the component protocol by hand (docs/protocol.md, "Daemon <->
component") and acks every phase with the JSON map of its first argument: what a component
in another language, or against another netspec, might send its daemon.

    rawack.py '{"status": "fine"}'
"""

import json
import os
import socket
import sys

from netspec.protocol import messages as m
from netspec.protocol.wire import FrameDecoder, encode

said = json.loads(sys.argv[1])
sock = socket.socket(fileno=int(os.environ[m.FD_ENV]))
sock.sendall(encode({"t": m.REGISTER, "phases": ["launch", "work"], "pid": os.getpid()}))
decoder = FrameDecoder()
while data := sock.recv(65536):
    for message in decoder.feed(data):
        if message["t"] == m.ENTER:
            sock.sendall(encode({"t": m.ACK, "id": message["id"], **said}))
        elif message["t"] == m.STOP:
            sys.exit(0)
