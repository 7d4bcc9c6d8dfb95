"""Reaching a run's fleet before its first step: each host started and connected, its hello
(facts, and the controller's clock offset from the reference host's), its setup with its
programs placed; then the fan-out tree and the clocks."""

from __future__ import annotations

import asyncio
import os
import time

import msgspec
from netspec.protocol import messages as m
from netspec.protocol.errors import DeadlineExceeded, NetspecError
from netspec.protocol.hostfacts import HostFacts
from netspec.protocol.runrecord import HostRecord

from ..experiment.model import Host as HostSpec
from ..experiment.model import Plan
from ..hosts.cluster import Clusters  # the Kubernetes client loads only for a cluster's first pod
from ..hosts.engines import Engines
from ..hosts.fleet import (
    AddressHost,
    DaemonClient,
    EventHandler,
    Host,
    LocalHost,
    connect_deadline_s,
    ensure_fd_limit,
)
from ..hosts.forks import DaemonForks
from ..hosts.pods import PodHost
from ..record.progress import Progress, ProgressSink
from ..record.rundir import RunDir
from .clocks import start_clocks, stretched
from .failures import CONNECTING, Unreachable, connect_failed, not_reached
from .fanout import FanOut, Tree
from .guard import Failure, guard
from .leftovers import sweep_dead_runs

FAN_OUT = 32  # hosts reached at once


def make_host(spec: HostSpec, forks: DaemonForks, accept_new: bool = False,
              keep_daemons: bool = False, run_id: str = "", engines: Engines | None = None,
              share: bool = False, clusters: Clusters | None = None) -> Host:
    """The Host for a spec. Local daemons are forked by `forks`; `accept_new` trusts
    unknown SSH host keys; `keep_daemons` starts SSH hosts' daemons detached, to outlive
    the run, and keeps a container host's container; a container host's names carry
    `run_id`, it is given a key of its own for the run (never the long-term key), and its
    engine is called through `engines`; an attached container another run uses is refused
    unless `share`."""
    if spec.kubernetes:
        assert engines is not None and clusters is not None  # the Fleet makes them for a plan with pods
        return PodHost(spec, run_id, engines, clusters, keep=keep_daemons)
    if spec.docker:
        from ..hosts.docker import DockerHost  # the Docker SDK loads only for a fleet with docker hosts

        assert engines is not None  # the Fleet makes them for a plan with container hosts
        return DockerHost(spec, run_id, engines, keep=keep_daemons, share=share)
    if spec.ssh:
        from ..hosts.remote import SSHHost  # paramiko loads only for a fleet with SSH hosts

        return SSHHost(spec, accept_new, detached=keep_daemons, run_id=run_id)
    return AddressHost(spec) if spec.address else LocalHost(spec, forks)


class Fleet:
    """A run's hosts and what reaching them found. Owned by a Run: `reach()` once, before the
    first step; its connections are read in the run's task group and closed at the run's
    end (finish.py)."""

    def __init__(self, plan: Plan, forks: DaemonForks, key: bytes, accept_new_host_keys: bool = False,
                 keep_daemons: bool = False, share_hosts: bool = False, run_id: str = ""):
        self.plan, self.key = plan, key
        self.share_hosts = share_hosts  # set up beside another run a host's daemon holds
        # The container hosts' engines and the pool where each call to them is made: closed
        # at the run's end, after the hosts were stopped (finish.py).
        self.engines = Engines() if any(h.docker or h.kubernetes for h in plan.hosts) else None
        # The pod hosts' clusters (an API client each, the run's namespaces): closed with the engines.
        self.clusters = Clusters() if any(h.kubernetes for h in plan.hosts) else None
        self.hosts: dict[str, Host] = {
            h.name: make_host(h, forks, accept_new_host_keys, keep_daemons, run_id, self.engines, share_hosts,
                              self.clusters)
            for h in plan.hosts}
        self.clients: dict[str, DaemonClient] = {}
        self.fan_out = FanOut(self.clients, Tree.over(plan.fan_out, tuple(self.hosts), plan.clock.reference)
                              if plan.fan_out else None)
        self.endpoints: dict[str, tuple[str, int]] = {}  # where each daemon was reached
        self.facts: dict[str, HostFacts] = {}
        self.addresses: dict[str, str] = {}
        # This controller's clock minus the reference host's, +- half the hello's round trip.
        self.controller_offset: tuple[int, int | None] = (0, None)

    async def reach(self, rundir: RunDir, progress: ProgressSink, on_event: EventHandler,
                    tg: asyncio.TaskGroup, failure: Failure) -> None:
        """Every host started, connected (its reader a task of `tg`, its events to
        `on_event`), said hello to and set up, under the plan's connect deadline; then the
        fan-out tree and the clocks, by the same deadline.

        Raises:
            NotConnected: a host could not be reached or set up, or not within the
                deadline (each such host named).
            NetspecError: the run's failure, if it came first.
        """
        loop = asyncio.get_running_loop()
        plan = self.plan
        ensure_fd_limit(len(self.hosts))
        if self.engines is not None:  # before the deadline: what dead runs left is collected first
            rundir.record.leftovers = await sweep_dead_runs(
                self.hosts, self.engines, self.clusters, rundir.id, rundir.path.parent.parent)
            for text in rundir.record.leftovers:
                progress(Progress("notice", text=text))
        connect_s = plan.connect_deadline_s or connect_deadline_s(list(self.hosts.values()))
        rundir.record.connect_deadline_s = connect_s
        deadline = loop.time() + connect_s
        gate = asyncio.Semaphore(FAN_OUT)
        join_token = os.urandom(16)  # what a parent in the run's fan-out tree shows its children

        async def reach(name: str) -> None:
            async with gate:
                try:
                    address = self.endpoints[name] = await self.hosts[name].start(rundir.host_dir(name))
                    for text in self.hosts[name].notes:
                        rundir.record.leftovers.append(f"host {name}: {text}")
                        progress(Progress("notice", text=f"host {name}: {text}"))
                    key = self.hosts[name].run_key or self.key
                    client = await DaemonClient.connect(name, address, key, on_event, deadline)
                except (NetspecError, OSError) as exc:  # no connection opened: none was lost
                    raise Unreachable(name, exc) from exc
                self.clients[name] = client
                tg.create_task(client.serve())
                sent = time.time_ns()
                hello = await client.request(m.HELLO, deadline)
                if name == plan.clock.reference and hello.now_ns is not None:
                    received = time.time_ns()
                    self.controller_offset = ((sent + received) // 2 - hello.now_ns,
                                              (received - sent) // 2)
                rundir.write_json(rundir.host_dir(name) / "facts.json", hello.facts)
                self.facts[name] = hello.facts
                self.addresses[name] = self.hosts[name].reachable_at(hello.facts)
                rundir.record.hosts[name] = HostRecord("{}:{}".format(*address), hello.pid,
                                                       placement=self.hosts[name].placement())
                specs = [c.wire() for c in plan.host_components(name)]
                placed = await self.hosts[name].place([c.program for c in specs if c.program is not None])
                components = [msgspec.structs.replace(c, program=placed[c.program]) if c.program is not None
                              else c for c in specs]
                await client.request(m.SETUP, deadline, run=rundir.id, host=name,
                                     components=components, join_token=join_token,
                                     streams={s.name: s.spec() for s in plan.streams},
                                     camp=plan.camp.spec() if plan.camp else None,
                                     packets=plan.packets.spec if plan.packets and name in plan.packets.hosts
                                     else None,
                                     share=self.share_hosts)
                reached.append(name)
                progress(Progress("count", CONNECTING, name, done=len(reached), total=len(names)))

        async def reach_each() -> dict[str, Exception | None]:
            """Every host reached at once, each one's failure kept to be said with the rest's."""
            outcome: dict[str, Exception | None] = {}

            async def one(name: str) -> None:
                try:
                    await reach(name)
                except Exception as exc:
                    outcome[name] = exc
                else:
                    outcome[name] = None
            async with asyncio.TaskGroup() as each:
                for name in names:
                    each.create_task(one(name))
            return {name: outcome[name] for name in names}

        names, reached = list(self.hosts), []
        connect_failed(await guard(
            failure, reach_each(), deadline,
            lambda: not_reached({n: ["its setup" if n in self.clients else "netspecd"]
                                for n in names if n not in reached}, connect_s)))
        try:
            keys = {name: host.run_key for name, host in self.hosts.items() if host.run_key}
            tree = await self.fan_out.connect(self.endpoints, keys, deadline)
            clocks = await start_clocks(plan.clock, self.clients, self.addresses, self.facts, deadline)
        except DeadlineExceeded as exc:  # what the fleet's reaching left of the deadline ran out
            raise not_reached(exc.waiting, connect_s) from exc
        if tree is not None:
            rundir.record.fan_out = tree
            progress(Progress("notice", text=f"steps go through a fan-out tree: {len(self.hosts)} "
                              f"hosts, {tree.width} children at most, {tree.depth} levels"))
        if clocks is not None:
            clocks.controller_offset_ns, clocks.controller_offset_bound_ns = self.controller_offset
            rundir.record.clksync = clocks
            if clocks.interval_ms > clocks.asked_interval_ms:
                progress(Progress("notice", text=stretched(clocks)))
        rundir.save()
