"""CAMP's Linux backend: /proc and /sys read directly. Each file is opened once and re-read
with pread (the kernel regenerates it on every read), and only the fields asked for are
parsed. A process's stat file stays open too: once the process is gone its descriptor reads
ESRCH, so a reused pid can never answer for it."""

from __future__ import annotations

import ctypes
import os
import time

from .counters import CampError, CpuTimes, DiskCounters, NetCounters, ProcessCounters, ProcessGone, ProcessId

TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
READ_SIZE = 65536
CPUCLOCK_SCHED = 2  # the scheduler's exact runtime, summed over every thread of the process
NET_DEV_HEADER_TOKENS = 20  # two header lines, split on white space
NET_DEV_LINE_TOKENS = 17  # a name and its 16 counters


class _Sysinfo(ctypes.Structure):
    _fields_ = [("uptime", ctypes.c_long), ("loads", ctypes.c_ulong * 3), ("totalram", ctypes.c_ulong),
                ("freeram", ctypes.c_ulong), ("sharedram", ctypes.c_ulong), ("bufferram", ctypes.c_ulong),
                ("totalswap", ctypes.c_ulong), ("freeswap", ctypes.c_ulong), ("procs", ctypes.c_ushort),
                ("pad", ctypes.c_ushort), ("totalhigh", ctypes.c_ulong), ("freehigh", ctypes.c_ulong),
                ("mem_unit", ctypes.c_uint), ("reserved", ctypes.c_char * 8)]


def process_clock(pid: int) -> int:
    """The clock id of a process's CPU time (what clock_getcpuclockid returns)."""
    return ((~pid) << 3) | CPUCLOCK_SCHED


def _token(tokens: list[bytes], name: bytes, first: int, stride: int) -> int:
    """Where `name` heads a row of `stride` tokens after `first` header tokens, or -1."""
    for at in range(first, len(tokens), stride):
        if tokens[at] == name:
            return at
    return -1


def stat_fields(data: bytes) -> list[bytes]:
    """/proc/PID/stat after the command name, which may itself hold spaces and parens:
    index 0 is field 3 (state) of proc(5); fields past rss (index 21) stay unsplit."""
    return data[data.rindex(b")") + 2:].split(None, 22)


class ProcBackend:
    """Lifecycle: created once, used from one thread at a time, `close` to drop its files."""

    def __init__(self, proc: str = "/proc", sys: str = "/sys"):
        self.proc, self.sys = proc, sys
        self._stat, self._net_dev = f"{proc}/stat", f"{proc}/net/dev"
        self._net_layout: dict[bytes, int] = {}  # interface -> its name's token in /proc/net/dev
        self.files: dict[str, int] = {}
        self.processes: dict[ProcessId, int] = {}
        self.schedstats: dict[ProcessId, int] = {}  # each sampled process's schedstat file
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._sysinfo = _Sysinfo()

    def _read(self, path: str) -> bytes:
        fd = self.files.get(path)
        if fd is None:
            fd = self.files[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        return os.pread(fd, READ_SIZE, 0)

    def cpu_times(self, cpu: int | None = None) -> CpuTimes:
        data = self._read(self._stat)
        prefix = b"cpu " if cpu is None else b"cpu%d " % cpu
        start = 0 if data.startswith(prefix) else data.find(b"\n" + prefix) + 1
        if start == 0 and cpu is not None:
            raise CampError(f"no CPU {cpu} in {self.proc}/stat ({self.cpu_count()} online)")
        fields = data[start:data.index(b"\n", start)].split()[1:9]
        return CpuTimes._make([int(f) * TICK_NS for f in fields])

    def cpu_count(self) -> int:
        return self._read(self._stat).count(b"\ncpu")

    def free_physical_memory(self) -> int:
        # sysinfo(2) is the same count as MemFree in /proc/meminfo, without formatting it all.
        if self._libc.sysinfo(ctypes.byref(self._sysinfo)) != 0:
            raise CampError(f"sysinfo: {os.strerror(ctypes.get_errno())}")
        return self._sysinfo.freeram * self._sysinfo.mem_unit

    def nets(self, interfaces: list[str]) -> list[NetCounters]:
        """Several interfaces from one read of /proc/net/dev."""
        # One split of the whole file; each interface's counters follow its name's token,
        # found once and checked at every read (an interface may come or go).
        t = self._read(self._net_dev).replace(b":", b" ").split()
        found = []
        for name in interfaces:
            key = name.encode()
            at = self._net_layout.get(key, 0)
            if at >= len(t) or t[at] != key:
                at = self._net_layout[key] = _token(t, key, NET_DEV_HEADER_TOKENS, NET_DEV_LINE_TOKENS)
                if at < 0:
                    raise CampError(f"no network interface '{name}' (interfaces: "
                                    f"{', '.join(self.network_interfaces())})")
            found.append(NetCounters(int(t[at + 9]), int(t[at + 10]), int(t[at + 1]), int(t[at + 2])))
        return found

    def net(self, interface: str) -> NetCounters:
        return self.nets([interface])[0]

    def disk(self, name: str) -> DiskCounters:
        try:
            f = self._read(f"{self.sys}/class/block/{name}/stat").split()
        except FileNotFoundError:
            raise CampError(f"no disk or partition '{name}' (disks: {', '.join(self.physical_disks())}; "
                            f"partitions: {', '.join(self.disk_partitions()) or 'none'})") from None
        return DiskCounters(reads=int(f[0]), writes=int(f[4]))

    def process(self, proc: ProcessId) -> ProcessCounters:
        try:
            # The clock first: if the stat read below still finds the process, the pid was
            # still its own when the clock was read.
            cpu_ns = time.clock_gettime_ns(process_clock(proc.pid))
            data = os.pread(self._process_fd(proc), 1024, 0)
        except OSError as e:  # ESRCH once it has exited, ENOENT or EINVAL if never seen
            self._forget(proc)
            raise ProcessGone(f"process {proc.pid} ({proc.name}) has exited") from e
        f = stat_fields(data)
        if f[0] in (b"Z", b"X"):
            self._forget(proc)
            raise ProcessGone(f"process {proc.pid} ({proc.name}) has exited")
        # Positional: a sampler calls this for every process at every instant.
        return ProcessCounters(cpu_ns, int(f[11]) * TICK_NS, int(f[12]) * TICK_NS, int(f[7]), int(f[9]),
                               int(f[21]) * PAGE, int(f[20]), int(f[17]), f[0] == b"R", self._waited(proc))

    def _waited(self, proc: ProcessId) -> int | None:
        """The process's main thread's time on a run queue, ns (schedstat's second field;
        None on a kernel without CONFIG_SCHED_INFO). Its file is opened with the stat file's
        check of the pid passed, and kept: once the process is gone it reads ESRCH."""
        fd = self.schedstats.get(proc)
        try:
            if fd is None:
                fd = self.schedstats[proc] = os.open(f"{self.proc}/{proc.pid}/schedstat",
                                                     os.O_RDONLY | os.O_CLOEXEC)
            return int(os.pread(fd, 128, 0).split()[1])
        except (OSError, IndexError, ValueError):
            return None

    def _process_fd(self, proc: ProcessId) -> int:
        fd = self.processes.get(proc)
        if fd is None:
            fd = os.open(f"{self.proc}/{proc.pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
            if int(stat_fields(os.pread(fd, 1024, 0))[19]) != proc.started:
                os.close(fd)
                raise ProcessLookupError(proc.pid)  # the pid belongs to a newer process
            self.processes[proc] = fd
        return fd

    def _forget(self, proc: ProcessId) -> None:
        for files in (self.processes, self.schedstats):
            fd = files.pop(proc, None)
            if fd is not None:
                os.close(fd)

    def network_interfaces(self) -> list[str]:
        lines = self._read(self._net_dev).decode().splitlines()[2:]
        return sorted(line.split(":", 1)[0].strip() for line in lines)

    def _block_devices(self) -> list[str]:
        with open(f"{self.proc}/partitions") as f:
            return [line.split()[3] for line in f.read().splitlines()[2:] if line.strip()]

    def physical_disks(self) -> list[str]:
        return sorted(d for d in self._block_devices() if os.path.exists(f"{self.sys}/block/{d}"))

    def disk_partitions(self) -> list[str]:
        return sorted(d for d in self._block_devices() if not os.path.exists(f"{self.sys}/block/{d}"))

    def process_identifier(self, pid: int) -> ProcessId:
        try:
            with open(f"{self.proc}/{pid}/stat", "rb") as f:
                data = f.read()
        except (FileNotFoundError, ProcessLookupError):
            raise ProcessGone(f"no process {pid}") from None
        return ProcessId(pid, data[data.index(b"(") + 1:data.rindex(b")")].decode(errors="replace"),
                         int(stat_fields(data)[19]))

    def process_identifiers(self, name: str) -> list[ProcessId]:
        found = []
        for entry in os.listdir(self.proc):
            if not entry.isdigit():
                continue
            try:
                exe = os.path.basename(os.readlink(f"{self.proc}/{entry}/exe")).removesuffix(" (deleted)")
            except PermissionError:
                exe = None  # another user's process: only its (truncated) command name shows
            except OSError:
                continue  # gone, or a kernel thread
            try:
                proc = self.process_identifier(int(entry))
            except ProcessGone:
                continue
            if exe == name or (exe is None and proc.name == name[:15]):
                found.append(proc)
        return sorted(found, key=lambda p: p.pid)

    def close(self) -> None:
        for fd in [*self.files.values(), *self.processes.values(), *self.schedstats.values()]:
            os.close(fd)
        self.files.clear()
        self.processes.clear()
        self.schedstats.clear()
