"""CAMP in a container: the node-wide figures are the container's own cgroup's, not the
machine's that /proc/stat and sysinfo(2) show through every container alike.

cgroup v1 (cpuacct, memory, blkio under /sys/fs/cgroup/<controller>/, the container's
own group mounted there by its engine) or v2 (cpu.stat, memory.current and .max, io.stat
under /sys/fs/cgroup/):
- CPU: the group's user and system time in ns (cpuacct.usage_user / usage_sys; v2
  cpu.stat user_usec, system_usec); idle is what its CPUs' allowance (its quota, else its
  cpuset) left of the time since boot, so busy/total over an interval is the share of its
  allowance it used. No iowait, irq, softirq or steal: a group has none of its own.
- free memory: its limit (or the machine's memory, if lower) less what it uses but for
  inactive file pages (as `docker stats` counts).
- a disk: the group's completed reads and writes on that device (blkio.throttle.io_serviced;
  v2 io.stat rios, wios); 0 for a device it never touched.
Interfaces are the container's own already (/proc/net/dev is per network namespace), and
processes are processes. `scope` says what the figures are, which the sampler writes into
the stream.
"""

from __future__ import annotations

import os
import time

from .counters import CampError, CpuTimes, DiskCounters
from .procfs import ProcBackend

CONTAINER_MARKERS = ("/.dockerenv", "/run/.containerenv")
ROOT = "/sys/fs/cgroup"
# Set by the host kinds that put netspecd in a container of their own (controller/hosts/docker.py,
# pods.py), to what the container is ("container", "pod"): there a group seen as "/" (a cgroup
# namespace of its own, cgroup v2's default) is the container's. A pod's containers, made by the
# cluster's runtime (containerd, CRI-O), carry neither of Docker's or Podman's markers.
CONTAINER_ENV = "NETSPEC_CONTAINER"


def in_container() -> bool:
    return bool(os.environ.get(CONTAINER_ENV)) or any(os.path.exists(m) for m in CONTAINER_MARKERS)


def cgroup_version(root: str = ROOT) -> int | None:
    """2 for a unified hierarchy, 1 for v1 with cpuacct and memory mounted, None otherwise."""
    if os.path.exists(f"{root}/cgroup.controllers"):
        return 2
    if all(os.path.exists(f"{root}/{f}") for f in ("cpuacct/cpuacct.usage", "memory/memory.usage_in_bytes")):
        return 1
    return None


class CgroupBackend(ProcBackend):
    """ProcBackend with the node-wide CPU, memory and disk figures of the cgroup at `root`."""

    def __init__(self, version: int, root: str = ROOT, proc: str = "/proc", sys: str = "/sys"):
        super().__init__(proc, sys)
        self.version, self.root = version, root
        self.group = self._group()
        # What a sample would otherwise ask again each time: the machine's memory, and whether
        # cgroup v1's CPU controller (a quota) is there at all.
        self.machine_memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        self.quota_v1 = version == 1 and os.path.exists(f"{root}/cpu/cpu.cfs_quota_us")
        controllers = "cpuacct, memory, blkio" if version == 1 else "cpu.stat, memory, io.stat"
        made = "this pod's netspecd container" if os.environ.get(CONTAINER_ENV) == "pod" else "this container"
        self.scope = (f"node figures are {made}'s cgroup v{version} ({controllers}) "
                      f"{self.group}, not the machine's")

    def _group(self) -> str:
        with open(f"{self.proc}/self/cgroup") as f:
            for line in f.read().splitlines():
                _, names, path = line.split(":", 2)
                if (self.version == 2 and names == "") or "cpuacct" in names.split(","):
                    return path
        return "/"

    def _text(self, name: str) -> str:
        return self._read(f"{self.root}/{name}").decode()

    def _keyed(self, name: str) -> dict[str, int]:
        return {k: int(v) for k, v in (line.split()[:2] for line in self._text(name).splitlines() if line)}

    def _allowance(self) -> float:
        """The CPUs the group may use: its quota, else its cpuset, else the machine's."""
        if self.version == 2:
            quota, period = self._text("cpu.max").split()
            if quota != "max":
                return int(quota) / int(period)
        else:
            quota = int(self._text("cpu/cpu.cfs_quota_us")) if self.quota_v1 else -1
            if quota > 0:
                return quota / int(self._text("cpu/cpu.cfs_period_us"))
        return float(len(os.sched_getaffinity(0)))

    def cpu_times(self, cpu: int | None = None) -> CpuTimes:
        if cpu is not None:
            return super().cpu_times(cpu)  # a group has no CPUs of its own: the machine's
        if self.version == 2:
            stat = self._keyed("cpu.stat")
            user, system = stat["user_usec"] * 1000, stat["system_usec"] * 1000
        else:
            user = int(self._text("cpuacct/cpuacct.usage_user"))
            system = int(self._text("cpuacct/cpuacct.usage_sys"))
        allowed = int(self._allowance() * time.clock_gettime_ns(time.CLOCK_BOOTTIME))
        return CpuTimes(user, 0, system, max(allowed - user - system, 0), 0, 0, 0, 0)

    def free_physical_memory(self) -> int:
        machine = self.machine_memory
        if self.version == 2:
            limit_text = self._text("memory.max").strip()
            limit = machine if limit_text == "max" else int(limit_text)
            used = int(self._text("memory.current")) - self._keyed("memory.stat").get("inactive_file", 0)
        else:
            limit = int(self._text("memory/memory.limit_in_bytes"))
            stat = self._keyed("memory/memory.stat")
            used = int(self._text("memory/memory.usage_in_bytes")) - stat.get("total_inactive_file", 0)
        return max(min(limit, machine) - max(used, 0), 0)

    def disk(self, name: str) -> DiskCounters:
        try:
            device = self._read(f"{self.sys}/class/block/{name}/dev").decode().strip()
        except FileNotFoundError:
            disks = ", ".join(self.physical_disks())
            raise CampError(f"no disk or partition '{name}' (disks: {disks})") from None
        reads = writes = 0
        if self.version == 2:
            for line in self._text("io.stat").splitlines():
                if line.startswith(f"{device} "):
                    fields = dict(f.split("=", 1) for f in line.split()[1:])
                    reads, writes = int(fields.get("rios", 0)), int(fields.get("wios", 0))
        else:
            for line in self._text("blkio/blkio.throttle.io_serviced").splitlines():
                words = line.split()
                if len(words) == 3 and words[0] == device:
                    reads += int(words[2]) if words[1] == "Read" else 0
                    writes += int(words[2]) if words[1] == "Write" else 0
        return DiskCounters(reads, writes)


def container_backend() -> CgroupBackend | None:
    """The cgroup backend where this process runs in a container whose cgroup it can read."""
    if not in_container():
        return None
    version = cgroup_version()
    if version is None:
        return None
    cgroup = CgroupBackend(version)
    # A machine that is itself a container (a CI runner, a sandbox) sees its own group as the
    # root: its figures are the machine's as /proc gives them, unless netspec made the container.
    return cgroup if cgroup.group != "/" or os.environ.get(CONTAINER_ENV) else None
