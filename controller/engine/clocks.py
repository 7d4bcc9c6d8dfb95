"""clksync for a run: the reference host serves probes, every other host probes it, from
connect to collect.

The reference answers every host's probes, so its load grows with the fleet: the probe
interval is stretched so that it answers at most REFERENCE_EXCHANGES_PER_S exchanges a
second however many hosts probe it (each host's bound is still computed from its own
exchanges, only from fewer of them). A stretched interval is said and recorded.
"""

from __future__ import annotations

import asyncio
import os

from netspec.clksync.client import VOLLEY
from netspec.clksync.packets import KEY_BYTES
from netspec.protocol import messages as m
from netspec.protocol.hostfacts import HostFacts
from netspec.protocol.runrecord import ClockSync

from ..experiment.model import ClockService
from ..hosts.fleet import DaemonClient

# At most about 5 % of a CPU on these machines: the reference's daemon spent 250-260 us of
# CPU per exchange answered (bench/scale.py, 100 hosts: 10 % at 400 exchanges/s, 5.2 % at 200),
# 100-120 us since it asks a TX stamp of its replies alone; among 1000 daemons on 2 cores more.
REFERENCE_EXCHANGES_PER_S = 180.0


def probe_interval_ms(asked_ms: float, probers: int) -> float:
    """The interval each of `probers` hosts sends a volley at: as asked, or longer where
    the reference would otherwise answer more than its budget."""
    return max(asked_ms, probers * VOLLEY * 1000.0 / REFERENCE_EXCHANGES_PER_S)


async def start_clocks(service: ClockService, clients: dict[str, DaemonClient], addresses: dict[str, str],
                       facts: dict[str, HostFacts], deadline: float) -> ClockSync | None:
    """Start serving and probing; what run.json records of it (None with one host)."""
    if len(clients) < 2:
        return None
    probers = [h for h in clients if h != service.reference]
    interval_ms = probe_interval_ms(service.interval_ms, len(probers))
    # A key for this run's probes alone, handed out over the authenticated connections.
    key = os.urandom(KEY_BYTES)
    served = await clients[service.reference].request(
        m.CLKSYNC, deadline, role="serve", key=key, timestamps=service.timestamps)
    await asyncio.gather(*(
        clients[h].request(m.CLKSYNC, deadline, role="probe", peer=service.reference,
                           address=reference_address(service.reference, h, addresses, facts),
                           port=served.port, key=key, interval_ms=interval_ms,
                           timestamps=service.timestamps)
        for h in probers))
    return ClockSync(reference=service.reference, probers=len(probers), asked_interval_ms=service.interval_ms,
                     interval_ms=interval_ms, reference_budget_per_s=REFERENCE_EXCHANGES_PER_S)


def stretched(clocks: ClockSync) -> str:
    """What the user is told of an interval longer than asked."""
    return (f"clksync: {clocks.probers} hosts probe the reference every {clocks.interval_ms:.0f} ms, "
            f"not {clocks.asked_interval_ms:.0f} ms, so that it answers at most "
            f"{clocks.reference_budget_per_s:.0f} exchanges/s")


def reference_address(reference: str, host: str, addresses: dict[str, str],
                      facts: dict[str, HostFacts]) -> str:
    """The address `host` reaches the reference host's probe server at."""
    ref_address = addresses[reference]
    if ref_address.startswith("127.") and not addresses[host].startswith("127."):
        # The reference runs beside this controller: the host reaches it at the
        # address its SSH connection came from.
        return facts[host].ssh_client_address or ref_address
    return ref_address
