"""The `sync_clocks` step's measurement: each host's clock against the reference host's.

The controller reads every daemon's CLOCK_REALTIME over the control channel, NTP-style:
t1 (controller) < daemon reading < t4 (controller), so the daemon's offset from the
controller lies within [reading - t4, reading - t1]. The minimum-RTT probe gives the
tightest interval. Two such intervals give a host's offset from the reference with a hard
bound. This is the control channel's coarse, user-space measure; clksync's kernel-stamped
probes refine it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass

from netspec.nodelib import messages as m

from .fleet import DaemonClient

PROBE_DEADLINE_S = 5.0


@dataclass(frozen=True)
class ClockEstimate:
    """A host's clock minus the reference's, and a bound the true offset lies within."""

    offset_ns: int
    bound_ns: int
    rtt_ns: int
    probes: int
    method: str = "control-channel"

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


async def probe(client: DaemonClient, count: int) -> ClockEstimate:
    """Offset of `client`'s host from this controller, from its minimum-RTT exchange."""
    loop = asyncio.get_running_loop()
    best: tuple[int, int] | None = None
    for _ in range(count):
        t1 = time.time_ns()
        reply = await client.request(m.CLOCK, loop.time() + PROBE_DEADLINE_S, during="sync_clocks")
        t4 = time.time_ns()
        rtt = t4 - t1
        if best is None or rtt < best[1]:
            best = (reply["realtime_ns"] - (t1 + t4) // 2, rtt)
    assert best is not None
    return ClockEstimate(best[0], (best[1] + 1) // 2, best[1], count)


async def measure(clients: dict[str, DaemonClient], reference: str,
                  count: int) -> dict[str, ClockEstimate]:
    """Every host's offset from `reference`; hosts are probed one at a time so that no
    probe waits behind another in this controller's event loop."""
    raw = {host: await probe(client, count) for host, client in clients.items()}
    ref = raw[reference]
    return {host: ClockEstimate(0, 0, 0, est.probes) if host == reference else
            ClockEstimate(est.offset_ns - ref.offset_ns, est.bound_ns + ref.bound_ns,
                          est.rtt_ns, est.probes)
            for host, est in raw.items()}
