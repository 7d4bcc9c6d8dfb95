"""Facts about this host that a run records so that results can be compared honestly."""

from __future__ import annotations

import os
import platform
import socket
import sys
from functools import cache
from pathlib import Path

import psutil
from netspec.protocol.hostfacts import HostFacts
from netspec.protocol.messages import netspec_version


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


@cache
def _cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


@cache
def _os_name() -> str:
    """platform.platform(), found once: it reads the Python binary to name its libc."""
    return platform.platform()


DAEMON_ADDRESS_ENV = "NETSPEC_DAEMON_ADDRESS"  # an address, or `hostname`: what it resolves to


def host_address() -> str:
    """The address the controller reached this host at: the server side of the SSH
    connection that started this daemon, or loopback for a local daemon; in a container
    (controller/hosts/docker.py), the address its hostname has on the run's network."""
    given = os.environ.get(DAEMON_ADDRESS_ENV, "")
    if given == "hostname":
        try:
            return socket.gethostbyname(socket.gethostname())
        except OSError:
            return "127.0.0.1"
    if given:
        return given
    parts = os.environ.get("SSH_CONNECTION", "").split()
    return parts[2] if len(parts) == 4 else "127.0.0.1"


def ssh_client_address() -> str | None:
    """The address the controller's SSH connection came from, which this host can reach."""
    parts = os.environ.get("SSH_CONNECTION", "").split()
    return parts[0] if len(parts) == 4 else None


def host_facts() -> HostFacts:
    """OS, kernel, CPU, memory, clock source, and the Python and netspec versions."""
    uname = os.uname()
    return HostFacts(
        hostname=socket.gethostname(), os=_os_name(), kernel=uname.release,
        boot_id=_read("/proc/sys/kernel/random/boot_id"), machine=uname.machine, cpu_model=_cpu_model(),
        cpu_count=os.cpu_count(), memory_bytes=psutil.virtual_memory().total,
        clock_source=_read("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        python=sys.version.split()[0], python_executable=sys.executable, netspec=netspec_version(),
        address=host_address(), ssh_client_address=ssh_client_address())
