"""Registers like a NETSPEC-aware program, then writes garbage on its netspec socket."""

import os
import socket
import struct

from netspec.protocol import messages
from netspec.protocol.wire import FrameDecoder, encode

sock = socket.socket(fileno=int(os.environ[messages.FD_ENV]))
sock.sendall(encode({"t": "register", "phases": ["work"], "pid": os.getpid()}))
decoder, received = FrameDecoder(), []
while len(received) < 2:  # welcome, then enter work: one read may bring both
    received += decoder.feed(sock.recv(4096))
sock.sendall(struct.pack(">I", 1 << 31))
sock.recv(1)
