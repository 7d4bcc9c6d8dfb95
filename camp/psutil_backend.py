"""CAMP's portable backend through psutil: the same API where there is no /proc, and a
cross-check of the procfs backend where there is. psutil gives CPU time at tick
resolution only (so `cpu_ns` is user + kernel time) and no page-fault counts (None), and
it cannot tell a disk from a partition: the partitions are the block devices mounted."""

from __future__ import annotations

import os

import psutil

from .counters import CampError, CpuTimes, DiskCounters, NetCounters, ProcessCounters, ProcessGone, ProcessId

NS = 1_000_000_000


def _ns(seconds: float) -> int:
    return round(seconds * NS)


class PsutilBackend:
    def __init__(self) -> None:
        self.handles: dict[ProcessId, psutil.Process] = {}

    def close(self) -> None:
        """Drop the process handles (psutil keeps no file open between calls)."""
        self.handles.clear()

    def cpu_times(self, cpu: int | None = None) -> CpuTimes:
        if cpu is None:
            t = psutil.cpu_times()
        else:
            per_cpu = psutil.cpu_times(percpu=True)
            if not 0 <= cpu < len(per_cpu):
                raise CampError(f"no CPU {cpu} ({len(per_cpu)} online)")
            t = per_cpu[cpu]
        return CpuTimes(*(_ns(getattr(t, f, 0.0)) for f in
                          ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")))

    def cpu_count(self) -> int:
        return psutil.cpu_count()

    def free_physical_memory(self) -> int:
        return psutil.virtual_memory().free

    def nets(self, interfaces: list[str]) -> list[NetCounters]:
        counters = psutil.net_io_counters(pernic=True, nowrap=False)
        missing = [i for i in interfaces if i not in counters]
        if missing:
            raise CampError(f"no network interface '{missing[0]}' "
                            f"(interfaces: {', '.join(sorted(counters))})")
        return [NetCounters(c.bytes_sent, c.packets_sent, c.bytes_recv, c.packets_recv)
                for c in (counters[i] for i in interfaces)]

    def net(self, interface: str) -> NetCounters:
        return self.nets([interface])[0]

    def disk(self, name: str) -> DiskCounters:
        counters = psutil.disk_io_counters(perdisk=True, nowrap=False)
        if name not in counters:
            raise CampError(f"no disk or partition '{name}' (devices: {', '.join(sorted(counters))})")
        return DiskCounters(counters[name].read_count, counters[name].write_count)

    def process(self, proc: ProcessId) -> ProcessCounters:
        try:
            handle = self.handles.get(proc) or self._handle(proc)
            with handle.oneshot():
                cpu, mem = handle.cpu_times(), handle.memory_info()
                threads, status = handle.num_threads(), handle.status()
        except psutil.NoSuchProcess:
            self.handles.pop(proc, None)
            raise ProcessGone(f"process {proc.pid} ({proc.name}) has exited") from None
        if status == psutil.STATUS_ZOMBIE:
            raise ProcessGone(f"process {proc.pid} ({proc.name}) has exited")
        return ProcessCounters(cpu_ns=_ns(cpu.user + cpu.system), user_ns=_ns(cpu.user),
                               kernel_ns=_ns(cpu.system), minor_faults=None, major_faults=None,
                               working_set=mem.rss, vm_size=mem.vms, threads=threads,
                               running=status == psutil.STATUS_RUNNING, waited_ns=None)

    def _handle(self, proc: ProcessId) -> psutil.Process:
        handle = psutil.Process(proc.pid)
        if _started(handle) != proc.started:
            raise psutil.NoSuchProcess(proc.pid)  # the pid belongs to a newer process
        self.handles[proc] = handle
        return handle

    def network_interfaces(self) -> list[str]:
        return sorted(psutil.net_io_counters(pernic=True))

    def _mounted(self) -> set[str]:
        return {os.path.basename(p.device) for p in psutil.disk_partitions(all=False)}

    def physical_disks(self) -> list[str]:
        return sorted(set(psutil.disk_io_counters(perdisk=True)) - self._mounted())

    def disk_partitions(self) -> list[str]:
        return sorted(set(psutil.disk_io_counters(perdisk=True)) & self._mounted())

    def process_identifier(self, pid: int) -> ProcessId:
        try:
            handle = psutil.Process(pid)
            return ProcessId(pid, handle.name(), _started(handle))
        except psutil.NoSuchProcess:
            raise ProcessGone(f"no process {pid}") from None

    def process_identifiers(self, name: str) -> list[ProcessId]:
        found = []
        for handle in psutil.process_iter(["name", "exe"]):
            if name in (handle.info["name"], os.path.basename(handle.info["exe"] or "")):
                found.append(ProcessId(handle.pid, handle.info["name"], _started(handle)))
        return sorted(found, key=lambda p: p.pid)


def _started(handle: psutil.Process) -> int:
    return round(handle.create_time() * 1000)  # ms since the epoch: enough to tell pids apart
