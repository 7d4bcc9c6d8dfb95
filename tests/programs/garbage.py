"""Registers like a NETSPEC-aware program, then writes garbage on its netspec socket."""

import os
import socket
import struct

from netspec.nodelib import messages
from netspec.nodelib.wire import encode

sock = socket.socket(fileno=int(os.environ[messages.FD_ENV]))
sock.sendall(encode({"t": "register", "phases": ["work"], "pid": os.getpid()}))
sock.recv(4096)  # welcome
sock.recv(4096)  # enter work
sock.sendall(struct.pack(">I", 1 << 31))
sock.recv(1)
