"""Node services: what netspecd itself records on its host during a run's logging windows.

Between start_logging and stop_logging the daemon writes its own `netspecd` stream: every
phase it enters in a component and every ack, in this host's clock, so analysis can put
each host's phase boundaries on the global timeline. The file is opened when the run is
set up and only switched on and off by the logging steps, so a node-wide step costs no
file creation.

clksync (netspec.clksync.node) writes the `clksync` stream beside it from setup to collect,
logging windows or not: the clock fit needs exchanges on both sides of every event.

With `links:` in the experiment, the run's link conditions on this host (netspec.links'
LinkSet: its rules, qdiscs and user-space queue) are made at the first `links` request and
removed by `close`, whatever ended the run.

With `services: packets:` the host's interfaces' packets are captured between the logging
steps (daemon/packets.py), netspec's own ports left out: the daemons' and SSH's TCP, clksync's
and the link audit's UDP.

With `services: camp:` the CAMP sampler (daemon.sampler) writes the `camp` stream during
the logging windows: the node's counters at randomized instants.

In a run with link conditions, the audit's probes (netspec.links.probes) write the `links`
stream from the moment their targets are known to collect: `open_probes` binds their port
at setup, `start_probes` sends to the peers this host has links to.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netspec.clksync.node import ClockService
from netspec.datastream.instrument import Datastreams
from netspec.datastream.writer import StreamConfig, StreamInfo
from netspec.links import Exclude, LinkSet
from netspec.links.probes import LinkProbes, Target, probe_port
from netspec.protocol.errors import NetspecError
from netspec.protocol.links import LinkOffer, LinkRule
from netspec.protocol.names import as_name
from netspec.protocol.packets import PACKETS_DIR, HeldPackets, PacketsSpec

from . import sampler
from .packets import Packets
from .sampler import CampConfig, CampSampler

NODE_STREAM = "netspecd"
CLOCK_STREAM = "clksync"
LINKS_STREAM = "links"
DAEMON_FLUSH_MS = 1000


class NodeServices:
    """The node services of one run. Lifecycle: `open` at setup, `start_logging` and
    `stop_logging` (again and again if the schedule says so), `close` at collect or
    reset; the files stay for collect."""

    def __init__(self, run_id: str, host: str, directory: Path, camp: CampConfig | None = None,
                 components: tuple[str, ...] = (), packets: PacketsSpec | None = None):
        self.run_id, self.host, self.directory = run_id, host, directory
        self.streams = Datastreams()
        self._enter = self.streams.event("NETSPECD", "enter", "a phase entered in a component")
        self._ack = self.streams.event("NETSPECD", "ack", "a component acked a phase")
        self.clock_streams = Datastreams()
        self.clock = ClockService(self.clock_streams)
        self.camp = camp
        # The sampled components are fixed for the run, so every logging window's records
        # have the same fields, whichever components are running then.
        self.sampled = [n for n in components if camp is not None and
                        (camp.processes is None or n in camp.processes)]
        self.camp_streams = Datastreams()
        self.sampler: CampSampler | None = None
        self.link_streams = Datastreams()
        self.probes: LinkProbes | None = None
        self.links: LinkSet | None = None
        self._making_links = threading.Lock()  # asked from worker threads: made once
        self.clock_ports: set[int] = set()  # clksync's server port: its probes are never conditioned
        self.own_tcp: set[int] = set()  # this daemon's listening port: never captured, as SSH's
        self.packets = None if packets is None else Packets(host, directory, packets, self._own_ports,
                                                            self._hold_into)
        self.held: HeldPackets | None = None  # while capturing: where the user-space path writes

    def link_set(self, tcp: list[int] | None = None, udp: list[int] | None = None,
                 have: LinkOffer | None = None) -> LinkSet:
        """The run's link conditions here (made at the first ask: the controller's `links`, or
        a fault's partition), never conditioning netspec's own ports: SSH's and `tcp` (the
        daemons'), clksync's and `udp`; each ask's ports are added to those before, and hold
        from the next change on. `have`: what this host offers, else probed (seconds: called
        off the loop)."""
        exclude = Exclude(tuple(sorted({22, *(tcp or ())})), tuple(sorted({*(udp or ()), *self.clock_ports})))
        with self._making_links:
            if self.links is None:
                self.links = LinkSet(self.run_id, self.host, exclude, have)
                self.links.hold_into(self.held)
            else:
                old = self.links.exclude
                self.links.exclude = Exclude(tuple(sorted({*old.tcp, *exclude.tcp})),
                                             tuple(sorted({*old.udp, *exclude.udp})))
            return self.links

    def close_links(self) -> None:
        """Remove every link condition of the run here; what could not be removed is raised."""
        if self.links is not None:
            failed = self.links.close()
            if failed:
                raise RuntimeError(f"run {self.run_id}: link conditions not all removed: {'; '.join(failed)}")

    def open(self) -> None:
        # Flushed each second, like CAMP's: a daemon's flusher then wakes once a second, not
        # ten times (an idle fleet's CPU); SIGTERM and the run's end still flush at once.
        self.streams.start([StreamConfig(NODE_STREAM, enable=("NETSPECD",), flush_ms=DAEMON_FLUSH_MS)],
                           StreamInfo(self.directory, run=self.run_id, host=self.host,
                                      component=NODE_STREAM), exit_hooks=False, paused=True)
        self.clock_streams.start([StreamConfig(CLOCK_STREAM, enable=("CLKSYNC",), flush_ms=DAEMON_FLUSH_MS)],
                                 StreamInfo(self.directory, run=self.run_id, host=self.host,
                                            component=CLOCK_STREAM), exit_hooks=False)
        if self.camp is not None:
            self.camp_streams = sampler.open_stream(self.directory, self.run_id, self.host)

    def open_probes(self, address: str = "0.0.0.0", port: int = 0, default_per_s: float | None = None,
                    stats: Callable[[], Any] | None = None) -> int:
        """Open the `links` stream and bind the audit's probe port on (address, port); the
        port bound, which the peers' probes are sent to. Once per run."""
        if not self.link_streams.streams:
            self.link_streams.start([StreamConfig(LINKS_STREAM, enable=("LINKS",), flush_ms=DAEMON_FLUSH_MS)],
                                    StreamInfo(self.directory, run=self.run_id, host=self.host,
                                               component=LINKS_STREAM), exit_hooks=False)
        probes = LinkProbes(self.link_streams, self.host, self.run_id,
                            *(() if default_per_s is None else (default_per_s,)), stats=stats)
        bound = probes.open(address, port)
        self.probes = probes
        return bound

    def probe_links(self, rules: list[LinkRule]) -> None:
        """Aim the audit's probes at the peers of the link rules just applied (every host of
        the run takes them on one port, `probe_port`): started at the first, at each peer's
        current rate after.

        Raises:
            NetspecError: the probes' port is taken on this host.
        """
        targets = [Target(r.peer, r.address, None if r.condition.rate_mbit is None
                          else r.condition.rate_mbit * 1e6) for r in rules]
        port = probe_port(self.run_id)
        if self.probes is None:
            try:
                self.open_probes(port=port, stats=None if self.links is None else self.links.stats)
            except OSError as exc:
                raise NetspecError(f"run {self.run_id}, host {self.host}: the link audit's probe port "
                                   f"UDP {port} cannot be bound ({exc})") from exc
        assert self.probes is not None
        if self.probes.thread is None:
            self.probes.start(targets, port)
        else:
            self.probes.aim(targets)

    def start_probes(self, targets: list[Target], port: int) -> None:
        """Probe each target (a peer this host has a link to) on `port` until `close`."""
        if self.probes is None:
            self.open_probes()
        assert self.probes is not None
        self.probes.start(targets, port)

    def start_logging(self, processes: dict[str, int]) -> None:
        """`processes`: each running component's pid, for the sampler to pick from."""
        self.streams.resume()
        if self.camp is not None and self.sampler is None:
            self.sampler = CampSampler(self.camp_streams, self.camp,
                                       {n: processes.get(n) for n in self.sampled})
            self.sampler.start()

    def started(self, name: str, pid: int) -> None:
        """Component `name` started: sampled from now on if logging is on and it is chosen."""
        if self.sampler is not None:
            self.sampler.attach(name, pid)

    def stop_logging(self) -> None:
        self.streams.pause()
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler = None

    def entered(self, step: int, phase: str, component: str) -> None:
        self._enter.log(step, {"phase": phase, "component": component})

    def acked(self, step: int, phase: str, component: str, status: str) -> None:
        self._ack.log(step, {"phase": phase, "component": component, "status": status})

    def _hold_into(self, held: HeldPackets | None) -> None:
        with self._making_links:
            self.held = held
            if self.links is not None:
                self.links.hold_into(held)

    def _own_ports(self) -> tuple[list[int], list[int]]:
        """netspec's own TCP and UDP ports on this host now, which a capture leaves out."""
        return sorted({22, *self.own_tcp}), sorted({*self.clock_ports, probe_port(self.run_id)})

    def close(self) -> None:
        """Remove the run's link conditions (their queue's thread joined), end the sampler's,
        clksync's and the probes' threads (each joined under its deadline) and close the
        streams. Every part is closed even if one fails; the first failure is raised after,
        the others noted on it."""
        failed: list[Exception] = []
        probes = self.probes.close if self.probes is not None else (lambda: None)
        captures = self.packets.stop if self.packets is not None else (lambda: None)
        for close in (captures, self.close_links, self.stop_logging, self.camp_streams.stop, self.clock.close,
                      self.clock_streams.stop, probes, self.link_streams.stop, self.streams.stop):
            try:
                close()
            except Exception as exc:  # raised below, once the other parts are closed too
                failed.append(exc)
        if failed:
            for other in failed[1:]:
                failed[0].add_note(f"also: {other}")
            raise failed[0]

    def collectable(self) -> list[dict[str, Any]]:
        """Every stream file of the run on this host: the node's and the components'."""
        captured = sorted((self.directory / PACKETS_DIR).glob("packets.*.*"))
        return [{"component": None, "name": f"streams/{as_name(p.name)}", "path": str(p)}
                for p in sorted(self.directory.glob("*.ds"))] + \
            [{"component": None, "name": f"streams/{PACKETS_DIR}/{as_name(p.name)}", "path": str(p)}
             for p in captured if p.suffix in (".pcap", ".json")]
