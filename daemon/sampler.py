"""The CAMP sampler of netspecd: reads the node's counters (system, interfaces, disks, the
run's processes) at randomized instants into the `camp` stream, during logging windows.

Instants follow McCanne and Torek: one uniformly random instant in each slot of
`interval_ms`, so no periodic workload can keep step with the sampling and every time
average taken from the samples (of run state, memory, thread count) is unbiased. Each
record carries the instant it was actually read.

Records (group CAMP): one `node` sample group per instant, its fields named by
`sample_fields` (`cpu.user`... in ns, `mem_free`, `net.<if>.<counter>`, `disk.<disk>.<counter>`,
`proc.<component>.<counter>`), a part that cannot be read being None; and `warning` events
(a process gone, an interface gone before its first read, a part unreadable, CPU
accounting). One record rather than one per part:
the record is most of the sampler's own cost in Python. The kernel
charges /proc/stat's CPU times to whatever runs at each tick, so a process that runs only
between ticks is never seen there; its own CPU time comes from the scheduler, exactly.
When the sampled processes alone ran for longer than /proc/stat says the whole node was
busy, a `warning` says by how much.
"""

from __future__ import annotations

import os
import random
import selectors
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from netspec.camp import (
    Backend,
    CampError,
    CpuTimes,
    DiskCounters,
    NetCounters,
    ProcessCounters,
    ProcessGone,
    ProcessId,
    default_backend,
)
from netspec.camp.procfs import TICK_NS
from netspec.datastream.instrument import Datastreams
from netspec.datastream.writer import StreamConfig, StreamInfo
from netspec.protocol.kinds import CampSpec

from .realtime import set_policy

NET_FIELDS = NetCounters._fields
DISK_FIELDS = DiskCounters._fields
PROC_FIELDS = ("pid", *ProcessCounters._fields)
_NO_PROCESS = (None,) * len(PROC_FIELDS)
# Samples are small and regular: a chunk a second costs a tenth of the writes of the
# default, and a crash loses at most a second of them.
STREAM = StreamConfig("camp", enable=("CAMP",), flush_ms=1000)
CHECK_EVERY_NS = 1_000_000_000
EPOLL_RESOLUTION_S = 0.001
# /proc/stat counts in ticks of 10 ms: a disagreement has to be larger than its granularity.
CHECK_SLACK_NS = 2 * TICK_NS
CHECK_SLACK_SHARE = 0.05
# How long `stop` waits for the thread: woken by its pipe, it takes one last sample.
STOP_S = 5.0


@dataclass(frozen=True)
class CampConfig:
    """What to sample; None means everything there is."""

    interval_ms: float = 100.0
    interfaces: tuple[str, ...] | None = None
    disks: tuple[str, ...] | None = None
    processes: tuple[str, ...] | None = None  # component names


def slot_instants(start_ns: int, interval_ns: int, rng: random.Random):
    """One uniformly random instant in each slot [start + k interval, start + (k+1) interval)."""
    slot = start_ns
    while True:
        yield slot + int(rng.random() * interval_ns)
        slot += interval_ns


class CampSampler:
    """Lifecycle: created at start_logging with the sampled components' pids (None for one
    not running), `start`, `stop` (or leave a `with` block); `sample` takes one full sample
    (the thread calls it). `stop` wakes the thread and joins it within STOP_S, then closes
    its pipe and the backend's files (a backend it was given stays its giver's): after it
    the sampler holds no thread and no descriptor. NodeServices owns the run's sampler."""

    def __init__(self, streams: Datastreams, config: CampConfig, processes: dict[str, int | None],
                 backend: Backend | None = None, rng: random.Random | None = None):
        self._owns_backend = backend is None
        self.backend = backend or default_backend()
        try:
            self._setup(streams, config, processes, rng)
        except BaseException:
            self._close_backend()
            raise

    def _setup(self, streams: Datastreams, config: CampConfig, processes: dict[str, int | None],
               rng: random.Random | None) -> None:
        self.config = config
        self.rng = rng or random.Random()
        self._warning = streams.event("CAMP", "warning", "counters missing or contradicting each other")
        if config.interfaces:
            self.interfaces = list(config.interfaces)
            self.backend.nets(self.interfaces)  # an unknown name fails here, naming what exists
        else:
            self.interfaces = self._present_interfaces()
        self.disks = list(config.disks or self.backend.physical_disks())
        for d in self.disks:
            self.backend.disk(d)
        if scope := getattr(self.backend, "scope", None):  # a container's cgroup (camp/cgroup.py)
            self.warn("cgroup", scope)
        self.processes: dict[str, ProcessId | None] = {}
        for name, pid in processes.items():
            try:
                self.processes[name] = None if pid is None else self.backend.process_identifier(pid)
            except ProcessGone:
                self.processes[name] = None
                self.warn("process_gone", f"component {name}: process {pid} is gone")
        fields = sample_fields(self.interfaces, self.disks, self.processes)
        self._node = streams.samples("CAMP", "node", fields,
                                     "one sample of the node: CPU times (ns), free memory, then each "
                                     "interface, disk and component process")
        self.samples = self.late = 0
        self._warned: set[str] = set()
        self._check: tuple[int, int, int] | None = None  # (at, /proc/stat busy, processes' ns)
        self.thread: threading.Thread | None = None
        self._wake: tuple[int, int] | None = None  # a pipe: a byte written stops the thread
        self._selector: selectors.BaseSelector | None = None  # waits on the pipe's read end

    def _present_interfaces(self) -> list[str]:
        """Every interface there is, read once: one listed but gone before that read (a
        container's or namespace's veth removed meanwhile) is left out and said, not fatal,
        since the file named none. Each pass drops one at least, so the loop ends."""
        interfaces = self.backend.network_interfaces()
        while True:
            try:
                self.backend.nets(interfaces)
                return interfaces
            except CampError:
                present = set(self.backend.network_interfaces())
                gone = [i for i in interfaces if i not in present]
                if not gone:
                    raise
                for name in gone:
                    self.warn("interface_gone", f"interface {name}: gone before its first read; "
                                                "not sampled")
                interfaces = [i for i in interfaces if i in present]

    def attach(self, name: str, pid: int) -> None:
        """Sample component `name` from now on: it started after start_logging."""
        if name in self.processes and self.processes[name] is None:
            try:
                # One value of an existing key: the sampling thread's loop over the dict is safe.
                self.processes[name] = self.backend.process_identifier(pid)
            except ProcessGone:
                self.warn("process_gone", f"component {name}: process {pid} is gone")

    def warn(self, kind: str, message: str, **detail: int) -> None:
        self._warning.log(0, {"kind": kind, "message": message, **detail})

    def sample(self) -> None:
        """One record: node-wide counters first (read within microseconds of each other),
        then each process; a part that cannot be read is None, and said once."""
        b = self.backend
        now = time.time_ns()
        cpu = b.cpu_times()
        values = [*cpu, b.free_physical_memory()]
        values += self._part("nets", lambda: [x for c in b.nets(self.interfaces) for x in c],
                             len(self.interfaces) * len(NET_FIELDS))
        values += self._part("disks", lambda: [x for d in self.disks for x in b.disk(d)],
                             len(self.disks) * len(DISK_FIELDS))
        processes_ns = 0
        for name, proc in self.processes.items():
            if proc is None:
                values += _NO_PROCESS
                continue
            try:
                c = b.process(proc)
            except ProcessGone as e:
                self.processes[name] = None
                self.warn("process_gone", f"component {name}: {e}")
                values += _NO_PROCESS
                continue
            processes_ns += c[0]
            values.append(proc.pid)
            values += c
        self._node.log(values, now)
        self.samples += 1
        self._compare(now, cpu.busy, processes_ns)

    def _part(self, what: str, read, width: int) -> list:
        try:
            return read()
        except (CampError, OSError) as e:  # an interface or disk removed mid-run
            if what not in self._warned:
                self._warned.add(what)
                self.warn("unreadable", f"{what}: {e}; recorded as missing from now on while it fails")
            return [None] * width

    def _compare(self, now: int, busy: int, processes_ns: int) -> None:
        if self._check is None:
            self._check = (now, busy, processes_ns)
            return
        at, busy0, processes0 = self._check
        window = now - at
        if window < CHECK_EVERY_NS:
            return
        self._check = (now, busy, processes_ns)
        seen, ran = busy - busy0, processes_ns - processes0
        if ran - seen > CHECK_SLACK_NS + CHECK_SLACK_SHARE * window:
            self.warn("cpu_accounting",
                      f"/proc/stat saw the node busy for {seen / 1e6:.0f} ms of {window / 1e6:.0f} ms, "
                      f"but the sampled processes alone ran {ran / 1e6:.0f} ms: they run between "
                      f"the kernel's ticks",
                      window_ns=window, proc_stat_busy_ns=seen, processes_ns=ran)

    def run(self) -> None:
        # At its instants the sampler must run, not wait for a core: a load that has just
        # woken on the sampler's core held it off, and the slots skipped for it fell where
        # the loads started, reading them low (tests/daemon/test_sampler.py).
        realtime = set_policy(os.SCHED_FIFO, 1)
        # The window's two ends are sampled as well as its random instants, so that a
        # counter's change over the window, and over every phase inside it, is measured
        # rather than cut short by up to an interval at each end.
        self.sample()
        interval_ns = int(self.config.interval_ms * 1e6)
        slots = 0
        for instant in slot_instants(time.monotonic_ns(), interval_ns, self.rng):
            slots += 1
            wait = (instant - time.monotonic_ns()) / 1e9
            if wait < 0:
                self.late += 1  # the last sample ended past this slot's instant: skip the slot
                continue
            # Wait on a pipe, not an Event: an Event's wait allocates and takes locks, and
            # every wakeup's cost is the sampler's own overhead. epoll has no fd limit, but
            # counts its timeout in whole milliseconds, rounded up: it waits for the pipe
            # until within a millisecond of the instant, and a sleep to the nanosecond does
            # the rest. Woken up to a millisecond late, the sampler skipped the next slot
            # a third of the time at 1 ms, and those skips fell where the loads woke up.
            if self._selector.select(max(wait - EPOLL_RESOLUTION_S, 0)):
                break
            time.sleep(max(instant - time.monotonic_ns(), 0) / 1e9)
            self.sample()
        self.sample()
        if self.late:
            self.warn("skipped", f"{self.late} of {slots} random instants had passed before the "
                                 "sampler could take them: their slots have no sample"
                                 + ("" if realtime else " (real-time priority refused: no CAP_SYS_NICE)"),
                      skipped=self.late, slots=slots)

    def start(self) -> None:
        self._wake = os.pipe()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake[0], selectors.EVENT_READ)
        self.thread = threading.Thread(target=self.run, name="camp", daemon=True)
        self.thread.start()

    def __enter__(self) -> CampSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """End the thread (it takes a last sample) and release what the sampler holds.
        Idempotent.

        Raises:
            CampError: the thread did not end within STOP_S (its pipe and the backend
                are left to it rather than closed under it).
        """
        if self.thread is not None:
            os.write(self._wake[1], b"x")
            self.thread.join(STOP_S)
            if self.thread.is_alive():
                raise CampError(f"camp: the sampler's thread did not end within {STOP_S:g} s of its stop")
            self.thread = None
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        if self._wake is not None:
            for fd in self._wake:
                os.close(fd)
            self._wake = None
        self._close_backend()

    def _close_backend(self) -> None:
        if self._owns_backend:
            self.backend.close()


def open_stream(directory: Path, run: str, host: str) -> Datastreams:
    """The camp stream's file in `directory`, opened for a sampler's records."""
    streams = Datastreams()
    streams.start([STREAM], StreamInfo(directory, run=run, host=host, component=STREAM.name),
                  exit_hooks=False)
    return streams


def sample_fields(interfaces: list[str], disks: list[str], processes: dict[str, object]) -> list[str]:
    """The field names of a `CAMP/node` record, in the order `CampSampler.sample` fills it."""
    return [*(f"cpu.{f}" for f in CpuTimes._fields), "mem_free",
            *(f"net.{i}.{f}" for i in interfaces for f in NET_FIELDS),
            *(f"disk.{d}.{f}" for d in disks for f in DISK_FIELDS),
            *(f"proc.{p}.{f}" for p in processes for f in PROC_FIELDS)]


def config_from_wire(spec: CampSpec | None) -> CampConfig | None:
    """What `setup` asks sampled (typed, its interval bounded, where its frame was read:
    protocol/kinds.py)."""
    if spec is None:
        return None
    return CampConfig(spec.interval_ms, *(None if v is None else tuple(v)
                                          for v in (spec.interfaces, spec.disks, spec.processes)))
