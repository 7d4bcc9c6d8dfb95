"""The `packets:` service on this host: the experiment's own packets on each of its
interfaces but loopback, captured by tcpdump between the logging steps into the run's files
(`<streams>/packets/`), with kernel nanosecond stamps (CLOCK_REALTIME, as clksync's are), so
that the merge can match each packet's two ends across hosts on the global timeline
(analysis/packets.py).

tcpdump writes each interface's pcap; its snap length and packet count bound it, its
kernel buffer what it can take in a burst, and what it counted, dropped and left at its limit
is its record beside the file (protocol/packets.py's CaptureRecord), said at stop_logging.
netspec's own traffic (the daemons' and SSH's TCP ports, clksync's and the link audit's UDP
ports) is left out by the filter unless asked. Each tcpdump gets SIGTERM if the daemon dies
(setpriv's death signal, as components get), and is stopped (SIGINT, then SIGKILL) by `stop`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from netspec.protocol.errors import NetspecError
from netspec.protocol.messages import ACK_WARNING
from netspec.protocol.packets import (
    PACKETS_DIR,
    CaptureRecord,
    HeldPackets,
    PacketsSpec,
    held_path,
    pcap_path,
    write_record,
)

from .ending import CLOCK_TICKS, activity
from .orphans import SPAWNED
from .spawn import with_death_signal

READY_S = 5.0  # tcpdump says "listening on" within this, or the capture is said not to run
STOP_S = 5.0  # after SIGINT, its stats written and its file flushed, or it is killed
SETTLE_S = 0.05  # before a stop: what the kernel holds for it read
_COUNTS = {"captured": re.compile(r"(\d+) packets? captured"),
           "received": re.compile(r"(\d+) packets? received by filter"),
           "dropped": re.compile(r"(\d+) packets? dropped by kernel")}


def interfaces() -> dict[str, list[str]]:
    """This host's interfaces but loopback, each with its IPv4 addresses (`ip -j addr`)."""
    done = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, timeout=10)
    if done.returncode:
        raise NetspecError(f"ip addr failed: {done.stderr.strip()}")
    return {link["ifname"]: [a["local"] for a in link.get("addr_info", []) if "local" in a]
            for link in json.loads(done.stdout or "[]")
            if link.get("ifname") != "lo" and "LOOPBACK" not in link.get("flags", [])}


def capture_filter(spec: PacketsSpec, tcp: list[int], udp: list[int]) -> str:
    """The pcap-filter expression of `spec`: IPv4, without netspec's own ports (`tcp`, `udp`)
    unless asked, only its ports if given, and its own filter."""
    parts = ["ip"]
    if not spec.own:
        own = [f"tcp port {p}" for p in tcp] + [f"udp port {p}" for p in udp]
        if own:
            parts.append(f"not ({' or '.join(own)})")
    if spec.ports:
        parts.append(f"({' or '.join(f'port {p}' for p in spec.ports)})")
    if spec.filter:
        parts.append(f"({spec.filter})")
    return " and ".join(parts)


class Capture:
    """One tcpdump on one interface. Lifecycle: `start` runs it and waits until it listens;
    `stop` ends it and writes its record; a capture that cannot start has its record say why."""

    def __init__(self, host: str, interface: str, addresses: list[str], directory: Path, spec: PacketsSpec,
                 window: int, expression: str):
        self.record = CaptureRecord(host=host, interface=interface, window=window,
                                    file=pcap_path(directory, window, interface).name, addresses=addresses,
                                    filter=expression, snaplen=spec.snaplen, count=spec.count,
                                    buffer_kib=spec.buffer_kib)
        self.directory = directory
        self.said = directory / f"packets.{window}.{interface}.stderr"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        tcpdump = shutil.which("tcpdump")
        if tcpdump is None:
            self.record.error = "tcpdump is not installed on this host (apt-get install tcpdump)"
            return
        # immediate mode: each packet read as it comes, so that a stop leaves none unread in a
        # half-filled block of the kernel's ring (a second's worth at tcpdump's usual timeout)
        argv = [tcpdump, "-i", self.record.interface, "-nn", "-Z", "root", "-B", str(self.record.buffer_kib),
                "--immediate-mode",
                "-s", str(self.record.snaplen), "-c", str(self.record.count), "--time-stamp-precision=nano",
                "-w", str(self.directory / self.record.file), self.record.filter]
        argv, before = with_death_signal(argv, dict(os.environ), self.directory)
        with open(self.said, "wb") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=err,
                                         preexec_fn=before, start_new_session=True)
        SPAWNED.add(self.proc.pid)
        self.record.started_ns = time.time_ns()
        give_up = time.monotonic() + READY_S
        while time.monotonic() < give_up:
            said = self.said.read_text(errors="replace")
            if "listening on" in said:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        self._end()
        self.record.error = f"tcpdump did not start listening: {self.said.read_text(errors='replace')[-500:]}"

    def stop(self) -> CaptureRecord:
        if self.proc is not None and self.proc.poll() is None:
            time.sleep(SETTLE_S)
            seen = activity([self.proc.pid]).get(self.proc.pid)  # its state and CPU so far, in ticks
            self.record.cpu_s = None if seen is None else seen[1] / CLOCK_TICKS
            self.proc.send_signal(signal.SIGINT)
        self._end()
        said = self.said.read_text(errors="replace") if self.said.exists() else ""
        for field, pattern in _COUNTS.items():
            found = pattern.search(said)
            if found:
                setattr(self.record, field, int(found.group(1)))
        self.record.limited = self.record.captured is not None and self.record.captured >= self.record.count
        if self.proc is not None and self.record.captured is None and not self.record.error:
            self.record.error = f"tcpdump ended without its counts: {said[-500:]}"
        write_record(self.directory, self.record)
        return self.record

    def _end(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        SPAWNED.discard(self.proc.pid)
        if self.record.stopped_ns is None:
            self.record.stopped_ns = time.time_ns()


class Packets:
    """This host's captures for one run. Lifecycle: `start` at each start_logging (one
    capture per interface, its files numbered by the window), `stop` at its stop_logging,
    which returns what each did (at the run's end, `stop` again ends any still running). Each
    call may block (a capture's start and end are waited for): called in a thread."""

    def __init__(self, host: str, streams: Path, spec: PacketsSpec,
                 own_ports: Callable[[], tuple[list[int], list[int]]],
                 hold_into: Callable[[HeldPackets | None], None]):
        self.host, self.directory, self.spec = host, streams / PACKETS_DIR, spec
        self.own_ports = own_ports  # netspec's own TCP and UDP ports here, as they are at each start
        self.hold_into = hold_into  # where the user-space link path writes what it holds
        self.captures: list[Capture] = []
        self.held: HeldPackets | None = None
        self.window = 0

    def start(self) -> None:
        if self.captures:
            return  # a second start_logging in a row: the window goes on
        self.directory.mkdir(parents=True, exist_ok=True)
        self.window += 1
        expression = capture_filter(self.spec, *self.own_ports())
        self.captures = [Capture(self.host, name, addresses, self.directory, self.spec, self.window,
                                 expression)
                         for name, addresses in sorted(interfaces().items())]
        for capture in self.captures:
            capture.start()
        self.held = HeldPackets(held_path(self.directory, self.window), self.spec.snaplen)
        self.hold_into(self.held)

    def started_ack(self) -> dict[str, str]:
        """The logging step's ack: where it captures, and what could not start (a warning)."""
        failed = [f"{c.record.interface}: {c.record.error}" for c in self.captures if c.record.error]
        running = [f"{c.record.interface} ({', '.join(c.record.addresses) or 'no address'})"
                   for c in self.captures if not c.record.error]
        said = f"packets: capturing on {', '.join(running) or 'no interface'}"
        if failed or not running:
            return {"status": ACK_WARNING, "message": "; ".join([said, *failed])}
        return {"message": said}

    def stop(self) -> list[CaptureRecord]:
        done = [capture.stop() for capture in self.captures]
        self.captures = []
        if self.held is not None:
            self.hold_into(None)
            self.held.close()
            if not self.held.written:  # no link held a packet: no file to read
                self.held.path.unlink(missing_ok=True)
            self.held = None
        return done


def stopped_ack(records: list[CaptureRecord]) -> dict[str, str]:
    """The stop_logging step's ack: each capture's counts; a warning where one dropped
    packets, stopped at its limit or did not run."""
    parts, trouble = [], False
    for r in records:
        if r.error:
            parts.append(f"{r.interface}: not captured ({r.error})")
        else:
            parts.append(f"{r.interface}: {r.captured} captured, {r.dropped or 0} dropped by the kernel"
                         + (f", stopped at its limit of {r.count}" if r.limited else ""))
        trouble = trouble or bool(r.error or r.dropped or r.limited)
    said = {"message": "packets: " + ("; ".join(parts) or "no capture was running")}
    return {"status": ACK_WARNING, **said} if trouble else said
