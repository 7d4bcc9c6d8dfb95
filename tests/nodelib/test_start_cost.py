"""What a NETSPEC-aware program loads before it registers, pinned by the modules it holds
(issue 55; the time and memory it saves are bench/nodestart.py's): nodelib, its entities and
its phase loop need neither an event loop nor a codec beyond msgpack. The stream writer, and
msgspec with it, load as the first streams open."""

import os
import socket
import subprocess
import sys

from netspec.protocol.blockingchannel import BlockingChannel

# What a program would otherwise load at its start, each a part of its cost measured by
# `python -X importtime -c "import netspec.nodelib"` on main before issue 55: the writer, the
# record schema and the control protocol's kinds (msgspec, typing_extensions, inspect), the
# asyncio channel, the version lookup (importlib.metadata, email), CAMP's counters, and
# typing, dataclasses, socket, hashlib, json and traceback of the standard library.
HEAVY = ("asyncio", "dataclasses", "email", "hashlib", "importlib.metadata", "inspect", "json", "msgspec",
         "netspec.camp", "netspec.datastream.schema", "netspec.datastream.writer", "netspec.protocol.channel",
         "netspec.protocol.kinds", "socket", "traceback", "typing")
WRITER = ("msgspec", "netspec.datastream.schema", "netspec.datastream.writer")

PROGRAM = f"""
import sys
from netspec import nodelib

nodelib.event("G", "e")
nodelib.register("modules", lambda ctx: ctx.publish(loaded=sorted(set(sys.modules) & set({HEAVY!r}))))
nodelib.run()
"""


def test_importing_nodelib_and_declaring_entities_loads_none_of_the_heavy_modules():
    code = ("import sys; from netspec import nodelib; nodelib.event('G', 'e'); nodelib.counter('G', 'c');"
            "nodelib.register('p', lambda ctx: None); print(' '.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True)
    assert sorted(set(done.stdout.split()) & set(HEAVY)) == []


def test_a_program_registers_and_takes_a_phase_without_them_and_loads_the_writer_with_its_streams(tmp_path):
    ours, theirs = socket.socketpair()
    env = {**os.environ, "NETSPEC_FD": str(theirs.fileno()), "NETSPEC_RUN": "r", "NETSPEC_COMPONENT": "c"}
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, pass_fds=(theirs.fileno(),))
    theirs.close()
    daemon = BlockingChannel(ours.detach())
    try:
        assert daemon.recv()["t"] == "register"
        daemon.send({"t": "welcome", "component": "c", "run": "r"})
        logging = {"streams": {"s": {"enable": ["G"]}}, "dir": str(tmp_path), "host": "h"}
        loaded = []
        for i, (phase, fields) in enumerate([("modules", {}), ("start_logging", {"logging": logging}),
                                             ("modules", {})]):
            daemon.send({"t": "enter", "id": i, "phase": phase, "params": {}, "published": {}, **fields})
            ack = daemon.recv()
            assert ack["status"] == "ok", ack
            if phase == "modules":
                loaded.append(ack["published"]["loaded"])
        daemon.send({"t": "stop"})
        assert proc.wait(timeout=30) == 0
    finally:
        daemon.close()
        proc.kill()
        proc.wait()
    before, after = loaded
    assert before == []
    assert set(WRITER) <= set(after)
    assert len(list(tmp_path.glob("s.*.ds"))) == 1
