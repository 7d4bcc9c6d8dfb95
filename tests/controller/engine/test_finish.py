"""A run's end: stopping the hosts is bounded, and a host not stopped is said."""

import asyncio

from netspec.controller.engine.finish import stop_hosts
from netspec.controller.experiment.model import Host as HostSpec
from netspec.controller.hosts.fleet import AddressHost
from netspec.protocol.runoutcome import RunOutcome


class StuckHost(AddressHost):
    """A host whose daemon never ends when asked (as one that ignores its stdin's end)."""

    async def stop(self, run_id: str = "") -> list[str]:
        await asyncio.get_running_loop().create_future()
        return []


class SaysHost(AddressHost):
    async def stop(self, run_id: str = "") -> list[str]:
        return ["netspecd did not exit within 15 s of its stdin's end: hung up on"]


def test_a_host_not_stopped_by_the_deadline_is_given_up_and_said_live_and_in_the_outcome():
    async def scenario():
        hosts = {"a": StuckHost(HostSpec("a", address="127.0.0.1:1")),
                 "b": AddressHost(HostSpec("b", address="127.0.0.1:1")),
                 "c": SaysHost(HostSpec("c", address="127.0.0.1:1"))}
        loop, said = asyncio.get_running_loop(), []
        started = loop.time()
        stops = await stop_hosts(hosts, "r", 0.2, said.append)
        return stops, said, loop.time() - started, asyncio.all_tasks() - {asyncio.current_task()}
    stops, said, took, left = asyncio.run(scenario())
    assert stops == ["host a: not stopped within 0.2 s at the run's end",
                     "host c: netspecd did not exit within 15 s of its stdin's end: hung up on"]
    assert [p.text for p in said] == stops
    assert 0.2 <= took < 5 and left == set()
    outcome = RunOutcome.ended(None, "", [], [], stops)
    assert (outcome.status, outcome.error.message, outcome.error.causes) == (
        "partial", "every step got through, but 2 host(s) did not stop cleanly", stops)
    failed = RunOutcome.ended(RuntimeError("boom"), "work", [], [], stops)
    assert (failed.status, failed.error.causes) == ("failed", stops)
