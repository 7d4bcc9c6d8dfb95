"""CAMP: one stateless API to the OS's own performance counters, after Gabel and Haungs
(LISA 2007).

Every function returns raw values as the kernel keeps them: cumulative counts, byte sizes,
CPU times in ns; groups of them as named tuples, which a sample record takes as they are.
Nothing is remembered between calls, so any caller can sample as often as it likes and
derive rates its own way (`camp.rates`). The one exception is the paper's
`percent_processor_time`, which blocks for its interval and reads twice.

Every enumeration's output is a valid input: `network_interfaces()` names what `net_*`
takes, `physical_disks()` and `disk_partitions()` what `disk_*` and `partition_*` take.
Processes are addressed by a `ProcessId` (pid and start time, so a reused pid is not
mistaken for the process it replaced).

Two backends: `procfs` (Linux: /proc and /sys files kept open and re-read with pread, only
the needed fields parsed) and `psutil` (everywhere else, and as a cross-check). The
default is procfs where /proc exists; in a container, procfs with the CPU, memory and disk
figures of the container's own cgroup (`cgroup`), whose `scope` says so.
"""

from __future__ import annotations

import os
import time

from .counters import Backend as Backend
from .counters import CampError as CampError
from .counters import CpuTimes as CpuTimes
from .counters import DiskCounters as DiskCounters
from .counters import NetCounters as NetCounters
from .counters import ProcessCounters as ProcessCounters
from .counters import ProcessGone as ProcessGone
from .counters import ProcessId as ProcessId


def default_backend() -> Backend:
    """procfs where /proc exists, its node figures the cgroup's in a container (cgroup.py);
    psutil elsewhere."""
    if os.path.exists("/proc/self/stat"):
        from .cgroup import container_backend
        from .procfs import ProcBackend
        return container_backend() or ProcBackend()
    from .psutil_backend import PsutilBackend
    return PsutilBackend()


_backend: Backend | None = None


def backend() -> Backend:
    """The backend the module-level functions use, created on first use."""
    global _backend
    if _backend is None:
        _backend = default_backend()
    return _backend


def percent_processor_time(cpu: int | None = None, interval_s: float = 0.1) -> float:
    """Busy % of all CPUs (or CPU `cpu`) over the next `interval_s`: reads, sleeps, reads."""
    before = backend().cpu_times(cpu)
    time.sleep(interval_s)
    after = backend().cpu_times(cpu)
    total = after.total - before.total
    return 100.0 * (after.busy - before.busy) / total if total > 0 else 0.0


def cpu_times(cpu: int | None = None) -> CpuTimes:
    return backend().cpu_times(cpu)


def cpu_count() -> int:
    return backend().cpu_count()


def free_physical_memory() -> int:
    """Free physical memory in bytes."""
    return backend().free_physical_memory()


def net_bytes_sent(interface: str) -> int:
    return backend().net(interface).bytes_sent


def net_packets_sent(interface: str) -> int:
    return backend().net(interface).packets_sent


def net_bytes_recv(interface: str) -> int:
    return backend().net(interface).bytes_recv


def net_packets_recv(interface: str) -> int:
    return backend().net(interface).packets_recv


def disk_reads(disk: str) -> int:
    return backend().disk(disk).reads


def disk_writes(disk: str) -> int:
    return backend().disk(disk).writes


def partition_reads(partition: str) -> int:
    return backend().disk(partition).reads


def partition_writes(partition: str) -> int:
    return backend().disk(partition).writes


def page_faults(proc: ProcessId) -> tuple[int | None, int | None]:
    """(minor, major) page faults of the process so far."""
    c = backend().process(proc)
    return c.minor_faults, c.major_faults


def cpu_time_total_ns(proc: ProcessId) -> int:
    """The process's CPU time, exact, from the scheduler."""
    return backend().process(proc).cpu_ns


def cpu_time_user_ns(proc: ProcessId) -> int:
    return backend().process(proc).user_ns


def cpu_time_kernel_ns(proc: ProcessId) -> int:
    return backend().process(proc).kernel_ns


def working_set(proc: ProcessId) -> int:
    """Resident memory in bytes."""
    return backend().process(proc).working_set


def vm_size(proc: ProcessId) -> int:
    """Virtual address space in bytes."""
    return backend().process(proc).vm_size


def thread_count(proc: ProcessId) -> int:
    return backend().process(proc).threads


def network_interfaces() -> list[str]:
    return backend().network_interfaces()


def physical_disks() -> list[str]:
    return backend().physical_disks()


def disk_partitions() -> list[str]:
    return backend().disk_partitions()


def process_identifier(pid: int) -> ProcessId:
    return backend().process_identifier(pid)


def process_identifiers(name: str) -> list[ProcessId]:
    """Every running process started from an executable called `name`."""
    return backend().process_identifiers(name)
