"""Where an SSH target resolves, from the experiment file's address and the SSH config
($NETSPEC_SSH_CONFIG, then ~/.ssh/config), and whether it is known on this machine without
asking the network (what `check` may do)."""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

CONFIG_ENV = "NETSPEC_SSH_CONFIG"


@dataclass(frozen=True)
class SSHTarget:
    """Where and as whom to log in, resolved from the experiment file and the SSH config."""

    hostname: str
    port: int = 22
    user: str | None = None
    identity_files: tuple[str, ...] = ()
    known_hosts: tuple[str, ...] = field(
        default_factory=lambda: (str(Path("~/.ssh/known_hosts").expanduser()),))

    @property
    def label(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.hostname}:{self.port}"


def resolve(target: str) -> SSHTarget:
    """Resolve `[user@]host[:port]` or a config alias."""
    user, _, rest = target.rpartition("@")
    name, _, port = rest.partition(":")
    found: dict[str, object] = {}
    for path in _config_files():
        looked = paramiko.SSHConfig.from_path(str(path)).lookup(name)
        if looked.get("hostname") == name:
            del looked["hostname"]  # paramiko's default, not this file's: a later file may name it
        for key, value in looked.items():
            found.setdefault(key, value)
    known = found.get("userknownhostsfile")
    known_files = tuple(str(Path(p).expanduser()) for p in str(known).split()) if known else None
    return SSHTarget(
        hostname=str(found.get("hostname", name)),
        port=int(port or found.get("port", 22)),  # type: ignore[call-overload]
        user=user or found.get("user") or None,  # type: ignore[arg-type]
        identity_files=tuple(str(Path(p).expanduser()) for p in found.get("identityfile", [])),  # type: ignore[attr-defined]
        **({"known_hosts": known_files} if known_files else {}))


HOSTS_FILE = Path("/etc/hosts")


def known_here(target: str) -> tuple[bool, list[str]]:
    """Whether the host of `[user@]host[:port]` is known on this machine without asking the
    network (what `check` may do): an address, a name of /etc/hosts, or a host the SSH config
    names (a `Host` line without wildcards, or one that gives it a HostName). Also the SSH
    config's host names, for a "did you mean"."""
    name = target.rpartition("@")[2].partition(":")[0]
    configs, aliases, listed = _local_names(tuple((str(p), p.stat().st_mtime_ns) for p in _config_files()))
    known = name == "localhost" or name in aliases or name in listed
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(name)
        known = True
    known = known or any(c.lookup(name).get("hostname", name) != name for c in configs)
    return known, aliases


@functools.cache
def _local_names(files: tuple[tuple[str, int], ...]) -> tuple[list[paramiko.SSHConfig], list[str], set[str]]:
    """The SSH config files (each read once per version: a fleet's file names many hosts),
    their host names without wildcards, and the names /etc/hosts gives."""
    configs = [paramiko.SSHConfig.from_path(path) for path, _ in files]
    aliases = sorted({h for c in configs for h in c.get_hostnames() if not set(h) & set("*?!")})
    listed: set[str] = set()
    with contextlib.suppress(OSError):
        for line in HOSTS_FILE.read_text().splitlines():
            listed.update(line.partition("#")[0].split()[1:])
    return configs, aliases, listed


def _config_files() -> list[Path]:
    extra = [Path(p) for p in os.environ.get(CONFIG_ENV, "").split(os.pathsep) if p]
    return [p for p in [*extra, Path("~/.ssh/config").expanduser()] if p.is_file()]
