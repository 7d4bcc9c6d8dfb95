"""The CAMP sampler of netspecd: reads the node's counters (system, interfaces, disks, the
run's processes) at randomized instants into the `camp` stream, during logging windows.

Instants follow McCanne and Torek: one uniformly random instant in each slot of
`interval_ms`, so no periodic workload can keep step with the sampling and every time
average taken from the samples (of run state, memory, thread count) is unbiased. Each
record carries the instant it was actually read.

Records (group CAMP, sample groups): `system` (CPU times in ns and free memory),
`net.<interface>`, `disk.<disk>`, `proc.<component>`; and `warning` events. The kernel
charges /proc/stat's CPU times to whatever runs at each tick, so a process that runs only
between ticks is never seen there; its own CPU time comes from the scheduler, exactly.
When the sampled processes alone ran for longer than /proc/stat says the whole node was
busy, a `warning` says by how much.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass

from netspec.nodelib.camp import Backend, CampError, ProcessGone, ProcessId, default_backend
from netspec.nodelib.camp.procfs import TICK_NS
from netspec.nodelib.instrument import Datastreams

SYSTEM_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "mem_free")
NET_FIELDS = ("bytes_sent", "packets_sent", "bytes_recv", "packets_recv")
DISK_FIELDS = ("reads", "writes")
PROC_FIELDS = ("pid", "cpu_ns", "user_ns", "kernel_ns", "minor_faults", "major_faults",
               "working_set", "vm_size", "threads", "running")
CHECK_EVERY_NS = 1_000_000_000
# /proc/stat counts in ticks of 10 ms: a disagreement has to be larger than its granularity.
CHECK_SLACK_NS = 2 * TICK_NS
CHECK_SLACK_SHARE = 0.05


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
    """Lifecycle: created at start_logging with the run's processes (component -> pid),
    `start`, `stop`; `sample` takes one full sample (the thread calls it)."""

    def __init__(self, streams: Datastreams, config: CampConfig, processes: dict[str, int],
                 backend: Backend | None = None, rng: random.Random | None = None):
        self.backend = backend or default_backend()
        self.config = config
        self.rng = rng or random.Random()
        self.interfaces = list(config.interfaces or self.backend.network_interfaces())
        self.disks = list(config.disks or self.backend.physical_disks())
        self.backend.nets(self.interfaces)  # an unknown name fails here, naming what exists
        for d in self.disks:
            self.backend.disk(d)
        self._system = streams.samples("CAMP", "system", SYSTEM_FIELDS,
                                       "CPU times (ns) and free memory (bytes)")
        self._net = [streams.samples("CAMP", f"net.{i}", NET_FIELDS, f"interface {i}")
                     for i in self.interfaces]
        self._disk = [streams.samples("CAMP", f"disk.{d}", DISK_FIELDS, f"disk {d}") for d in self.disks]
        self._warning = streams.event("CAMP", "warning", "counters that contradict each other")
        self.processes: dict[str, tuple[ProcessId, object]] = {}
        for name, pid in processes.items():
            try:
                proc = self.backend.process_identifier(pid)
                self.processes[name] = (proc, streams.samples("CAMP", f"proc.{name}", PROC_FIELDS,
                                                              f"component {name}"))
            except ProcessGone:
                self._warning.log(0, {"kind": "process_gone", "component": name, "pid": pid})
        self.samples = self.late = 0
        self._check: tuple[int, int, int] | None = None  # (at, /proc/stat busy, processes' ns)
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def sample(self) -> None:
        b = self.backend
        # One instant for the node-wide groups, read within microseconds of each other.
        now = time.time_ns()
        cpu = b.cpu_times()
        self._system.log((*cpu, b.free_physical_memory()), now)
        for entity, counters in zip(self._net, b.nets(self.interfaces), strict=True):
            entity.log(counters, now)
        for entity, name in zip(self._disk, self.disks, strict=True):
            entity.log(b.disk(name), now)
        processes_ns = 0
        gone = []
        for name, (proc, entity) in self.processes.items():
            now = time.time_ns()
            try:
                c = b.process(proc)
            except ProcessGone:
                gone.append(name)
                continue
            processes_ns += c[0]
            entity.log((proc.pid, *c), now)
        for name in gone:
            del self.processes[name]
        self.samples += 1
        self._compare(now, cpu.busy, processes_ns)

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
            self._warning.log(0, {"kind": "cpu_accounting", "window_ns": window, "proc_stat_busy_ns": seen,
                                  "processes_ns": ran,
                                  "message": f"/proc/stat saw the node busy for {seen / 1e6:.0f} ms of "
                                             f"{window / 1e6:.0f} ms, but the sampled processes alone ran "
                                             f"{ran / 1e6:.0f} ms: they run between the kernel's ticks"})

    def run(self) -> None:
        interval_ns = int(self.config.interval_ms * 1e6)
        for instant in slot_instants(time.monotonic_ns(), interval_ns, self.rng):
            wait = (instant - time.monotonic_ns()) / 1e9
            if wait < 0:
                self.late += 1  # the last sample overran this slot's instant: skip the slot
                continue
            if self.stopping.wait(wait):
                return
            self.sample()

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, name="camp", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(timeout=5)
            self.thread = None


def config_from_wire(d: dict | None) -> CampConfig | None:
    if d is None:
        return None
    try:
        return CampConfig(float(d.get("interval_ms", 100.0)),
                          *(tuple(d[k]) if d.get(k) is not None else None
                            for k in ("interfaces", "disks", "processes")))
    except (TypeError, ValueError) as e:
        raise CampError(f"camp: bad configuration {d!r}: {e}") from None
