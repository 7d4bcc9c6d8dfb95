"""What a host's daemon says of its host when reached: written by the daemon
(daemon/facts.py), carried by the hello's reply (protocol/kinds.py `HelloReply`), kept as
hosts/<host>/facts.json by the controller (controller/engine/reach.py) and read back here
alone (`read_facts`): results are compared against it (analysis/provenance.py),
and hosts of one kernel or one address found by it (analysis/machines.py)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from .errors import NetspecError


class HostFacts(msgspec.Struct, kw_only=True):
    """A host's facts. Every field has a default: a facts.json of an older netspec, or of a
    daemon that could not tell one, reads as what it said."""

    hostname: str = ""
    os: str = ""
    kernel: str = ""
    # One kernel's every namespace and container has the same: hosts that share it share the
    # machine's CPU, memory and disks (analysis says so of CAMP's node counters).
    boot_id: str = ""
    machine: str = ""
    cpu_model: str = ""
    cpu_count: int | None = None
    memory_bytes: int | None = None
    clock_source: str = ""
    python: str = ""
    python_executable: str = ""
    netspec: str = ""
    address: str = ""  # where the controller reached it (daemon/facts.py `host_address`)
    ssh_client_address: str | None = None  # where its SSH connection came from, which it can reach


def read_facts(path: Path) -> HostFacts | None:
    """The facts kept at `path`; None where the file is missing, unreadable or not a host's
    facts."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=HostFacts)
    except (OSError, msgspec.DecodeError, NetspecError):
        return None
