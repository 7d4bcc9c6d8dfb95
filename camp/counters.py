"""CAMP's value types (what every function returns), its errors, and the interface each
backend provides."""

from __future__ import annotations

from typing import NamedTuple, Protocol

from netspec.protocol.errors import NetspecError


class CampError(NetspecError):
    """An unknown interface, disk or partition, or a process that cannot be read."""


class ProcessGone(CampError):
    """The process has exited (or its pid now belongs to another process)."""


class ProcessId(NamedTuple):
    """A tuple, so that hashing it (a sampler does, per process, per sample) is C's."""

    pid: int
    name: str
    started: int  # the backend's start time of the process: tells a reused pid apart


class CpuTimes(NamedTuple):
    """Time spent in each state since boot, in ns, for all CPUs together or one."""

    user: int
    nice: int
    system: int
    idle: int
    iowait: int
    irq: int
    softirq: int
    steal: int

    @property
    def busy(self) -> int:
        return self.user + self.nice + self.system + self.irq + self.softirq + self.steal

    @property
    def total(self) -> int:
        return self.busy + self.idle + self.iowait


class NetCounters(NamedTuple):
    bytes_sent: int
    packets_sent: int
    bytes_recv: int
    packets_recv: int


class DiskCounters(NamedTuple):
    reads: int  # completed read operations
    writes: int


class ProcessCounters(NamedTuple):
    """One process (all its threads): CPU in ns (`cpu_ns` from the scheduler's own
    accounting, exact; `user_ns` + `kernel_ns` from the tick-based split), memory in bytes,
    whether it was running or runnable at the instant it was read, and how long its main
    thread has waited on a run queue, runnable but given no CPU (`waited_ns`: the
    scheduler's run_delay, /proc/PID/schedstat; None where the backend cannot tell)."""

    cpu_ns: int
    user_ns: int
    kernel_ns: int
    minor_faults: int | None  # None where the backend cannot tell
    major_faults: int | None
    working_set: int
    vm_size: int
    threads: int
    running: bool
    waited_ns: int | None


class Backend(Protocol):
    def cpu_times(self, cpu: int | None = None) -> CpuTimes: ...
    def cpu_count(self) -> int: ...
    def free_physical_memory(self) -> int: ...
    def net(self, interface: str) -> NetCounters: ...
    def nets(self, interfaces: list[str]) -> list[NetCounters]: ...
    def disk(self, name: str) -> DiskCounters: ...
    def process(self, proc: ProcessId) -> ProcessCounters: ...
    def network_interfaces(self) -> list[str]: ...
    def physical_disks(self) -> list[str]: ...
    def disk_partitions(self) -> list[str]: ...
    def process_identifier(self, pid: int) -> ProcessId: ...
    def process_identifiers(self, name: str) -> list[ProcessId]: ...
    def close(self) -> None: ...
