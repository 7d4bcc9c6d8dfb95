"""Which hosts of a run read one machine's counters, so that a figure over hosts counts a
shared machine once: hosts on one kernel (one boot_id) see its CPUs, unless CAMP read a
container's cgroup for them (camp/cgroup.py: then the figure is the container's own); hosts on
one kernel at one address (local daemons: one network namespace) see its interfaces' bytes.
Read by the per-phase figures (analysis/phases.py), the browser's resources and the compare page.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
from netspec.protocol.hostfacts import HostFacts

from .provenance import shared_kernels

CGROUP_HOSTS_SQL = """SELECT DISTINCT host FROM events WHERE entity = 'CAMP/warning'
                      AND json_extract_string(data, '$.kind') = 'cgroup'"""


@dataclass(frozen=True)
class Machines:
    cpus: dict[str, float] = field(default_factory=dict)  # host -> its CPUs (its daemon's facts)
    cpu_shared: list[list[str]] = field(default_factory=list)  # one kernel's hosts whose CPU is the machine's
    own_cgroup: list[list[str]] = field(default_factory=list)  # one kernel's hosts CAMP read a cgroup of
    net_of: dict[str, str] = field(default_factory=dict)  # host -> the first host of its network namespace

    def net_shared(self) -> list[list[str]]:
        """The groups of two or more hosts that read one network namespace's counters."""
        groups: dict[str, list[str]] = {}
        for host, first in sorted(self.net_of.items()):
            groups.setdefault(first, []).append(host)
        return [hosts for hosts in groups.values() if len(hosts) > 1]


def machines(db: duckdb.DuckDBPyConnection | None, facts: dict[str, HostFacts]) -> Machines:
    """The run's hosts by the machine they read (`facts`: each host's facts.json, as
    `provenance.host_facts` reads them; `db`: the result set, for the hosts CAMP read a cgroup
    of, or None to take none)."""
    cgroup = set()
    if db is not None and "events" in {r[0] for r in db.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}:
        cgroup = {h for (h,) in db.execute(CGROUP_HOSTS_SQL).fetchall()}
    cpus = {h: float(f.cpu_count) for h, f in facts.items() if f.cpu_count is not None}
    kernels = shared_kernels(facts)
    cpu_shared = [shared for group in kernels if len(shared := [h for h in group if h not in cgroup]) > 1]
    own = [mine for group in kernels if (mine := [h for h in group if h in cgroup])]
    net_of: dict[str, str] = {}
    for group in kernels:
        by_address: dict[str, list[str]] = {}
        for h in group:
            by_address.setdefault(facts[h].address, []).append(h)
        net_of.update({h: min(hosts) for address, hosts in by_address.items() if address for h in hosts})
    return Machines(cpus, cpu_shared, own, net_of)


def once_per_machine(values: dict[str, float], of: dict[str, str]) -> float:
    """The sum of hosts' `values` with the hosts `of` maps to one machine counted once (their
    mean: each read the same counters, at instants a little apart)."""
    per: dict[str, list[float]] = {}
    for host, value in values.items():
        per.setdefault(of.get(host, host), []).append(value)
    return sum(sum(vs) / len(vs) for vs in per.values())
