"""The control-channel clock estimate against real daemons on this machine: they share one
clock, so the true offset is exactly 0 and must lie within every bound."""

import asyncio
import json
import subprocess
import sys

from netspec.controller.clocks import measure
from netspec.controller.fleet import DaemonClient


def test_local_daemons_are_measured_within_their_bound(key, tmp_path):
    procs = [subprocess.Popen([sys.executable, "-m", "netspec.daemon.main", "--listen",
                               "127.0.0.1:0", "--announce", "--root", str(tmp_path / f"r{i}")],
                              stdout=subprocess.PIPE, text=True) for i in range(2)]
    try:
        ports = [json.loads(p.stdout.readline())["port"] for p in procs]

        async def scenario():
            clients = {}
            for name, port in zip("ab", ports, strict=True):
                clients[name] = await DaemonClient.connect(name, ("127.0.0.1", port), key,
                                                           lambda h, e: None)
            serving = [asyncio.create_task(c.serve()) for c in clients.values()]
            estimates = await measure(clients, "a", 30)
            for c in clients.values():
                await c.close()
            await asyncio.gather(*serving)
            return estimates
        estimates = asyncio.run(scenario())
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    assert estimates["a"].offset_ns == 0 and estimates["a"].bound_ns == 0
    b = estimates["b"]
    assert b.probes == 30 and b.rtt_ns > 0
    assert abs(b.offset_ns) <= b.bound_ns  # the truth, 0, is inside the bound
