"""What a NETSPEC-aware program costs to start, against bare Python's: the CPU and wall time
from its spawn to its first registration, and its memory (RSS, PSS) then and once at work.

This script plays netspecd's part over the component socketpair, as daemon/spawn.py hands it
over (NETSPEC_FD, the run's environment), with the frames nodelib reads and writes
(protocol/wire.py). Each of `--repeat` rounds spawns, one after the other:
  bare     `python bare.py`: writes one byte to its end of the socketpair and waits there;
           its "registration" is that byte (the floor: the interpreter's own start)
  nodelib  `python bench/twophases.py`: registers two phases (warm, ping), is welcomed,
           enters start_logging (a stream of this script's), ping (it logs one event),
           stop_logging, and is stopped; its event is then read back from its stream file
The programs run with their bytecode cached, as an installed package has it: a first round,
not counted, writes the caches (PYTHONDONTWRITEBYTECODE is dropped from their environment).
Per program: its CPU at its registration (/proc/PID/schedstat: every thread, in ns), the
wall time from before the spawn to the registration's arrival, RSS and PSS
(/proc/PID/smaps_rollup) then, and for nodelib its CPU, RSS and PSS again after its ping
acked (the stream open, the event logged: what it holds at work, and what its start_logging
cost, which loads the stream writer). Medians over the rounds; the ratios
are nodelib's over bare Python's of the same run. Targets (issue 55): CPU at most 2x, PSS at
most 1.5x, at registration.

Prints figures for people, then one JSON object as the last line.

    python bench/nodestart.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from netspec.datastream.reader import read_streams
from netspec.protocol import messages as m
from netspec.protocol.blockingchannel import BlockingChannel

HERE = Path(__file__).resolve().parent
BARE = "import os\nfd = int(os.environ['NETSPEC_FD'])\nos.write(fd, b'r')\nos.read(fd, 1)\n"
WAIT_S = 60.0
TARGETS = {"cpu": 2.0, "pss": 1.5}


def cpu_ns(pid: int) -> int:
    """The CPU a process has used, all its threads, in ns (the scheduler's own account)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def memory_kb(pid: int) -> dict[str, int]:
    """RSS and PSS, kB."""
    got = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Rss", "Pss"):
            got[key.lower()] = int(value.split()[0])
    return got


def spawn(argv: list[str], workdir: Path,
          env: dict[str, str]) -> tuple[subprocess.Popen[bytes], socket.socket, float]:
    ours, theirs = socket.socketpair()
    ours.settimeout(WAIT_S)  # the bare program's byte; the aware one's frames: `receive`
    cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env = {**cached, **env, m.FD_ENV: str(theirs.fileno()), m.RUN_ENV: "nodestart",
           m.COMPONENT_ENV: "c", m.HOST_ENV: "h", m.PARAMS_ENV: "{}", "PYTHONUNBUFFERED": "1"}
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=workdir, env=env, pass_fds=(theirs.fileno(),),
                            stdin=subprocess.DEVNULL)
    theirs.close()
    return proc, ours, started


def receive(channel: BlockingChannel) -> dict[str, Any] | None:
    """The program's next message, waited for WAIT_S at most."""
    if not select.select([channel.fd], [], [], WAIT_S)[0]:
        raise SystemExit(f"bench/twophases.py sent nothing in {WAIT_S:g} s")
    return channel.recv()


def at_registration(proc: subprocess.Popen[bytes], started: float) -> dict[str, float]:
    wall = time.perf_counter() - started
    return {"cpu_ms": cpu_ns(proc.pid) / 1e6, "wall_ms": wall * 1e3,
            **{f"{k}_mb": v / 1024 for k, v in memory_kb(proc.pid).items()}}


def bare(workdir: Path) -> dict[str, float]:
    program = workdir / "bare.py"
    program.write_text(BARE)
    proc, ours, started = spawn([sys.executable, str(program)], workdir, {})
    try:
        if ours.recv(1) != b"r":
            raise SystemExit("bare.py did not write its byte")
        got = at_registration(proc, started)
        ours.sendall(b"x")
        proc.wait(WAIT_S)
        return got
    finally:
        ours.close()
        proc.kill()
        proc.wait()


def aware(workdir: Path, round_: int) -> dict[str, float]:
    streams = workdir / f"streams{round_}"
    proc, ours, started = spawn([sys.executable, str(HERE / "twophases.py")], workdir, {})
    ours.setblocking(True)
    channel = BlockingChannel(ours.detach(), peer="bench/twophases.py")
    try:
        register = receive(channel)
        got = at_registration(proc, started)
        if register is None or register["t"] != m.REGISTER or not {"warm", "ping"} <= set(register["phases"]):
            raise SystemExit(f"twophases.py registered {register!r}")
        channel.send({"t": m.WELCOME, "component": "c", "run": "nodestart"})
        logging = {"streams": {"bench": {"enable": ["BENCH"]}}, "dir": str(streams), "host": "h"}
        for i, phase in enumerate([m.START_LOGGING, "ping", m.STOP_LOGGING]):
            channel.send({"t": m.ENTER, "id": i, "phase": phase, "params": {}, "published": {},
                          **({"logging": logging} if phase == m.START_LOGGING else {})})
            ack = receive(channel)
            if ack is None or ack["status"] != m.ACK_OK:
                raise SystemExit(f"twophases.py in phase {phase}: {ack!r}")
            if phase == "ping":
                got.update({f"{k}_at_work_mb": v / 1024 for k, v in memory_kb(proc.pid).items()})
                got["cpu_at_work_ms"] = cpu_ns(proc.pid) / 1e6
        channel.send({"t": m.STOP})
        if proc.wait(WAIT_S) != 0:
            raise SystemExit(f"twophases.py exited {proc.returncode}")
        pings = [r for r in read_streams(streams.glob("*.ds"))
                 if getattr(r.entity, "name", None) == "ping" and r.tag == 1]
        if len(pings) != 1:
            raise SystemExit(f"twophases.py's stream holds {len(pings)} ping events, not 1")
        return got
    finally:
        channel.close()
        proc.kill()
        proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    rounds: dict[str, list[dict[str, float]]] = {"bare": [], "nodelib": []}
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as tmp:
        for i in range(args.repeat + 1):  # the first writes the bytecode caches
            got = bare(Path(tmp)), aware(Path(tmp), i)
            if i > 0:
                rounds["bare"].append(got[0])
                rounds["nodelib"].append(got[1])
    print(f"{args.repeat} rounds, each program's bytecode cached; {sys.executable}")
    results: dict[str, float] = {"repeat": args.repeat}
    for name, got in rounds.items():
        medians = {k: statistics.median(r[k] for r in got) for k in got[0]}
        results.update({f"{name}_{k}": round(v, 2) for k, v in medians.items()})
        at_work = (f"; at work CPU {medians['cpu_at_work_ms']:.1f} ms, "
                   f"RSS {medians['rss_at_work_mb']:.1f} MB, "
                   f"PSS {medians['pss_at_work_mb']:.1f} MB" if "rss_at_work_mb" in medians else "")
        print(f"{name:>8}: to registration CPU {medians['cpu_ms']:6.1f} ms, "
              f"wall {medians['wall_ms']:6.1f} ms; "
              f"then RSS {medians['rss_mb']:5.1f} MB, PSS {medians['pss_mb']:5.1f} MB{at_work}")
    for figure, key in (("cpu", "cpu_ms"), ("wall", "wall_ms"), ("rss", "rss_mb"), ("pss", "pss_mb")):
        ratio = results[f"nodelib_{key}"] / results[f"bare_{key}"]
        results[f"{figure}_ratio"] = round(ratio, 2)
        target = TARGETS.get(figure)
        verdict = "" if target is None else \
            f" (target <= {target}x: {'met' if ratio <= target else 'MISSED'})"
        print(f"nodelib / bare, {figure}: {ratio:.2f}x{verdict}")
    print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())
