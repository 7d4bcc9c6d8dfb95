"""One function per request type. Handlers know nothing of sockets: they take the session
and the request, decoded into its type where it was read (protocol/kinds.py), and return
the reply's fields, or raise to send an error reply.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from netspec.clksync import packets
from netspec.links import offer
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.errors import NetspecError, ProtocolError
from netspec.protocol.names import safe_name

from . import leftovers, release
from .facts import host_facts
from .packets import stopped_ack
from .relay import Emit, Relay
from .runs import Session, acted_on, check_join, check_setup, check_subtrees, own_run, reset_under_way
from .sampler import config_from_wire
from .spawn import python_argv
from .supervisor import Supervisor

log = logging.getLogger("netspecd")

# A straggler ended by `end` is stuck in a phase: its callback cannot take a STOP message.
END_GRACE_S = 2.0
ENTER_GRACE_S = 2.0  # past the step's deadline, before the daemon acks an enter as failed itself
# A setup of a run id whose last connection ended waits this long for its reset (a reset
# waits for spawns, SIGTERM, then SIGKILL: KILL_GRACE_S each) when the request has no deadline.
RESET_WAIT_S = 8.0

Handler = Callable[[Session, Any], Awaitable[k.Reply]]


async def hello(session: Session, request: k.Hello) -> k.Reply:
    return k.HelloReply(protocol=m.PROTOCOL_VERSION, pid=os.getpid(), facts=host_facts(),
                        now_ns=time.time_ns())


async def setup(session: Session, request: k.Setup) -> k.Reply:
    """Set up a run on this connection (ending the one it had). Refused beside another
    controller's live run unless the request says `share: true`, naming that run."""
    loop = asyncio.get_running_loop()
    await reset_under_way(session, request, _deadline(request) or loop.time() + RESET_WAIT_S)
    async with session.lifecycle:
        token = check_setup(session, request)
        await session.end_run()
        specs = [_runnable(c) for c in request.components]
        sup = Supervisor(request.run, session.daemon.root, specs, session, session.tg,  # type: ignore[arg-type]
                         request.host, request.streams, config_from_wire(request.camp), request.packets)
        sup.join_token = token
        if session.daemon.port is not None:  # the controllers' and a tree's connections: never captured
            sup.services.own_tcp.add(session.daemon.port)
        session.supervisor, session.daemon.runs[sup.run_id] = sup, session
        sup.hold()
        sup.services.open()
        await release.prepare()
    log.info("run %s: %s", sup.run_id, ", ".join(s.name for s in specs) or "no components")
    return k.SetupReply(root=str(sup.root))


def _runnable(spec: k.ComponentSpec) -> k.ComponentSpec:
    """The component as this daemon runs it: its name checked for a path, and an aware
    program's command line (the interpreter's, python_argv)."""
    name = safe_name(spec.name, "component")
    if spec.aware:
        return msgspec.structs.replace(spec, name=name, argv=python_argv(spec.program, spec.args))
    return spec if name == spec.name else msgspec.structs.replace(spec, name=name)


def enter(session: Session, request: k.Enter) -> k.Reply:
    """Start the phase in each named component; each ack follows as its own event. In a
    fan-out tree (`hosts` instead of `components`) the enter is relayed on, and the acks
    go up in batches (relay.py). Answered as it is read (INLINE_HANDLERS): nothing here
    waits, and a node step of this daemon's own is acked before the next frame is read."""
    sup = acted_on(session)
    comps, emit = request.components, session.emit
    if request.hosts is not None:
        index = request.hosts.get(sup.host)
        comps = request.lists[index] if index is not None and request.lists is not None else []
    unknown = [c.name for c in comps if c.name not in sup.components and c.name != m.NODE]
    if unknown:
        raise NetspecError(f"unknown components {unknown}")
    if request.hosts is not None:
        # A batch that goes to the controller (this is a first-level host) is compressed.
        to_controller = session.daemon.runs.get(sup.run_id) is session
        comps, emit = _relay(session, sup).enter(request, session.emit, to_controller)
    if request.release_ns is not None:
        session.tg.create_task(_release(sup, request, comps, emit))
    else:
        for comp in comps:
            _start(sup, request, comp, emit)
    return k.EnterReply(accepted=len(comps))


def _relay(session: Session, sup: Supervisor) -> Relay:
    """The run's relay on this daemon: its controller's session holds it and closes it
    when the run ends (a leaf of the tree gets one at its first relayed step, with no
    children)."""
    owner = session.daemon.runs.get(sup.run_id)
    if owner is None or owner.supervisor is not sup:
        raise NetspecError(f"run {sup.run_id!r} has ended on this daemon")
    if owner.relay is None:
        owner.relay = Relay(sup.host, owner.emit)
    return owner.relay


async def _release(sup: Supervisor, request: k.Enter, comps: list[k.Participant], emit: Emit) -> None:
    """Enter the step at the instant it names on the reference clock (`release: at`)."""
    assert request.release_ns is not None
    at, said = release.local_instant(sup.services.clock, request.release_ns)
    entered, refused = await release.wait_until(at)  # the phase's start, not its tasks' a loop turn later
    released = k.Release(**said, realtime_refused=refused)
    for comp in comps:
        _start(sup, request, comp, emit, released, entered)


def _start(sup: Supervisor, request: k.Enter, comp: k.Participant, emit: Emit,
           released: k.Release | None = None, entered: int | None = None) -> None:
    """Enter the phase in one component. This daemon's own part in a step that waits for
    nothing is done and acked at once: a task and a timeout for it cost a node step more
    than its work (bench/nodestep.py)."""
    entered = time.time_ns() if entered is None else entered
    if comp.name == m.NODE and sup.services.packets is not None and request.phase in (m.START_LOGGING,
                                                                                      m.STOP_LOGGING):
        sup.tg.create_task(_capturing(sup, request, emit, released, entered))
    elif comp.name == m.NODE and request.phase != m.SYNC_CLOCKS:
        try:
            ack = node_phase(sup, request.phase)
        except NetspecError as exc:
            ack = _own_words(exc)
        except Exception as exc:
            ack = _fault_ack(exc)
        _ack(sup, request, m.NODE, ack, entered, emit, released)
    else:
        sup.tg.create_task(_enter_one(sup, request, comp, emit, released, entered))


async def _enter_one(sup: Supervisor, request: k.Enter, comp: k.Participant, emit: Emit,
                     released: k.Release | None, entered: int) -> None:
    phase, step, name = request.phase, request.step, comp.name
    deadline_s = request.deadline_s
    deadline = asyncio.get_running_loop().time() + deadline_s if deadline_s else None
    try:
        # The controller acts at the step's deadline; this bound is for when it cannot.
        async with asyncio.timeout(deadline_s + ENTER_GRACE_S if deadline_s else None):
            ack = await _run_phase(sup, step, phase, name, comp, request.published, deadline)
    except TimeoutError:
        ack = {"status": m.ACK_ERROR, "message": f"netspecd: no ack within the step's deadline "
               f"of {deadline_s:g} s (and {ENTER_GRACE_S:g} s more)"}
    except Exception as exc:
        ack = _fault_ack(exc)
    if name != m.NODE:
        sup.services.acked(step, phase, name, ack["status"])
    _ack(sup, request, name, ack, entered, emit, released)


def _own_words(exc: NetspecError) -> dict[str, Any]:
    """The daemon's own part failed, said in its own words (e.g. why its clock is not in sync)."""
    return {"status": m.ACK_ERROR, "message": str(exc)}


def _fault_ack(exc: Exception) -> dict[str, Any]:
    err = m.error_map(exc)
    return {"status": m.ACK_ERROR, "message": f"netspecd: {err['type']}: {err['message']}",
            "traceback": err["traceback"]}


def _ack(sup: Supervisor, request: k.Enter, name: str, ack: dict[str, Any], entered: int,
         emit: Emit, released: k.Release | None) -> None:
    # Where this host's clock stood from the reference as the phase began: the run puts
    # every participant's start on the global timeline with it (the release skew).
    est = sup.services.clock.estimate(entered)
    emit(k.Ack(**ack, step=request.step, component=name, entered=entered, acked=time.time_ns(),
               entry_clock=None if est is None else (est.offset_ns, est.bound_ns), release=released))


async def _run_phase(sup: Supervisor, step: int, phase: str, name: str, comp: k.Participant,
                     published: dict[str, Any], deadline: float | None) -> dict[str, Any]:
    if name == m.NODE:  # sync_clocks: every other node step is acked as it is read (_start)
        try:
            return await sync_clocks(sup, comp.params)
        except NetspecError as exc:
            return _own_words(exc)
    sup.services.entered(step, phase, name)
    return await sup.enter(name, phase, comp.params, published, deadline, step)


async def sync_clocks(sup: Supervisor, params: dict[str, Any]) -> dict[str, Any]:
    """The daemon's own part in sync_clocks: wait until this host's clock bound is within
    the asked one."""
    est = await sup.services.clock.within(params.get("until_bound_ns"), params["wait_s"])
    return {"status": m.ACK_OK, "clock": k.Clock(**est.as_dict())}


async def _capturing(sup: Supervisor, request: k.Enter, emit: Emit, released: k.Release | None,
                     entered: int) -> None:
    """A logging step on a host that captures its packets: the captures started (each one
    listening) before the step's ack, or stopped and what each did said in it; in a thread,
    each tcpdump's start and end waited for off the loop."""
    captures = sup.services.packets
    assert captures is not None
    try:
        if request.phase == m.START_LOGGING:
            await asyncio.to_thread(captures.start)
            ack = node_phase(sup, request.phase) | captures.started_ack()
        else:
            ack = node_phase(sup, request.phase) | stopped_ack(await asyncio.to_thread(captures.stop))
    except NetspecError as exc:
        ack = _own_words(exc)
    except Exception as exc:
        ack = _fault_ack(exc)
    _ack(sup, request, m.NODE, ack, entered, emit, released)


def node_phase(sup: Supervisor, phase: str) -> dict[str, Any]:
    """The daemon's own part in any other node-wide step, where node services start and
    stop: nothing to wait for."""
    if phase == m.START_LOGGING:
        sup.services.start_logging(sup.running_pids())
    elif phase == m.STOP_LOGGING:
        sup.services.stop_logging()
    return {"status": m.ACK_OK}


async def end(session: Session, request: k.End) -> k.Reply:
    """End one component now (a k-of-n step's straggler): the rest of the run goes on."""
    sup = own_run(session, "end a component of")
    name = request.component
    if name not in sup.components:
        raise NetspecError(f"unknown component {name!r}")
    comp = sup.components[name]
    info = await comp.stop(grace=END_GRACE_S, deadline=_deadline(request))
    log.info("run %s: component %s ended as asked", sup.run_id, name)
    return k.EndReply(returncode=info.get("returncode"), forced=comp.forced)


def _deadline(request: k.Request) -> float | None:
    """The request's deadline (its `timeout_s`, which also bounds its handler) as a loop
    time, a little before the handler's bound: what the handler waited for is said in its
    own words, not as the bound's TimeoutError."""
    timeout = request.timeout_s
    if timeout is None:
        return None
    return asyncio.get_running_loop().time() + timeout - min(0.5, timeout / 10)


async def reset(session: Session, request: k.Reset) -> k.Reply:
    async with session.lifecycle:
        if session.supervisor is None:
            return k.ResetReply(killed=0)
        sup = own_run(session, "reset")
        killed = await sup.reset(clean=request.clean, deadline=_deadline(request))
    cleaned = " and cleaned" if request.clean else ""
    log.info("run %s: reset%s, %d process(es) ended", sup.run_id, cleaned, killed)
    return k.ResetReply(killed=killed)


async def files(session: Session, request: k.Files) -> k.Reply:
    sup = own_run(session, "list the files of")
    sup.services.close()  # collecting ends the logging window, stop_logging or not
    sup.faults.close_stream()  # and the faults stream: its records are in its file when listed
    found = await asyncio.to_thread(sup.collectable)  # a stat per file: not on the loop
    sup.listed = {f["path"] for f in found if not f["missing"]}
    return k.FilesReply(files=[k.FileEntry(**f) for f in found])


async def read(session: Session, request: k.Read) -> k.Reply:
    """A slice of a collectable file; nothing else on the host can be read."""
    path = request.path
    if path not in own_run(session, "read the files of").listed:
        raise ProtocolError(f"{path!r} is not a file of this run's last `files` listing")
    size = min(request.size, m.READ_LIMIT)
    data = await asyncio.to_thread(read_regular, path, request.offset, size)
    return k.ReadReply(data=data, eof=len(data) < size)


def read_regular(path: str, offset: int, size: int) -> bytes:
    """Up to `size` bytes of the regular file `path` from `offset`. A FIFO or device a
    component left among its files is refused, never waited on: opened non-blocking, checked."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ProtocolError(f"{path} is not a regular file")
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


async def clksync(session: Session, request: k.Clksync) -> k.Reply:
    """This host's part in clksync for the run: the probe server (role "serve", replies
    with its port) or a probe client of the reference host's server."""
    clock = own_run(session, "start clksync in").services.clock
    kernel = request.timestamps == "kernel"
    key = request.key
    if len(key) < packets.KEY_BYTES:
        raise ProtocolError(f"clksync needs a probe key of at least {packets.KEY_BYTES} bytes")
    services = own_run(session, "start clksync in").services
    if request.role == "serve":
        # Every host of the run must reach it, at addresses only they know; what keeps
        # others out is the key.
        port = clock.serve("0.0.0.0", key, kernel)
        services.clock_ports.add(port)  # never conditioned by the run's links
        return k.ClksyncReply(port=port)
    assert request.peer is not None and request.address is not None  # a probe's (kinds.Clksync)
    assert request.port is not None and request.interval_ms is not None
    services.clock_ports.add(request.port)
    clock.probe(request.peer, request.address, request.port, key, request.interval_ms / 1000, kernel)
    return k.Reply()


async def links(session: Session, request: k.Links) -> k.Reply:
    """The run's link conditions from this host (netspec.links): checked against what the
    host offers (`check`: every condition the run will ask, at launch), or applied, the
    reply saying when they were in effect on this host's clock and its estimate then.
    A condition no backend here can apply is refused, naming the link and what is missing."""
    sup = own_run(session, "set the link conditions of")
    have = await asyncio.to_thread(offer)
    link_set = await asyncio.to_thread(sup.services.link_set, request.exclude_tcp, request.exclude_udp, have)
    if request.check:
        placements = link_set.place(request.rules)
        await asyncio.to_thread(link_set.prepare, request.rules)  # a fault's cut at its instant has them
        sup.services.probe_links([])  # from launch on, every host of a link takes the audit's probes
        return k.LinksReply(offer=have, placements=placements)
    applied = await asyncio.to_thread(link_set.apply, request.rules)
    sup.services.probe_links(request.rules)  # the audit's probes (netspec.links.probes) measure them
    est = sup.services.clock.estimate(applied.applied_ns)
    log.info("run %s: link conditions toward %s applied", sup.run_id,
             ", ".join(r.peer for r in request.rules))
    return k.LinksReply(offer=have, placements=applied.placements, began_ns=applied.began_ns,
                        applied_ns=applied.applied_ns,
                        clock=None if est is None else (est.offset_ns, est.bound_ns))


async def tree(session: Session, request: k.Tree) -> k.Reply:
    """Connect to this host's children in the run's fan-out tree: [{host, address: [ip, port],
    hosts: its subtree's hosts}]."""
    sup = own_run(session, "build the tree of")
    children = request.children
    check_subtrees(sup.host, children)
    if sup.join_token is None:
        raise NetspecError(f"run {sup.run_id!r} was set up without a join token: its hosts take no "
                           "parent in a tree")
    relay = _relay(session, sup)
    await relay.open(sup.run_id, session.daemon.key, sup.join_token, children, session.tg)
    return k.TreeReply(children=len(relay.links))


async def join(session: Session, request: k.Join) -> k.Reply:
    """A parent in the run's fan-out tree: this connection relays the run's steps to it and
    carries their acks back. It uses the run another session set up, and never ends it
    (who may join, runs.check_join)."""
    session.supervisor, session.joined = check_join(session, request), True
    return k.Reply()


async def fault(session: Session, request: k.Fault) -> k.Reply:
    """A fault of the experiment's schedule, done at its instant (daemon/faults.py); its
    report follows as an event of its own (`FaultDone`)."""
    own_run(session, "schedule a fault in").faults.schedule(request)
    return k.Reply()


async def shutdown(session: Session, request: k.Shutdown) -> k.Reply:
    async with session.lifecycle:
        if session.supervisor is not None:
            await own_run(session, "shut the daemon down under").reset(clean=request.clean,
                                                                         deadline=_deadline(request))
    asyncio.get_running_loop().call_soon(session.daemon.stop)
    return k.Reply()


async def left(session: Session, request: k.Left) -> k.Reply:
    """What this daemon's start ended of a run whose daemon died here (leftovers.py): told
    once, then forgotten. Refused for a run this daemon holds: nothing of it was left."""
    run = safe_name(request.run, "run id")
    if run in session.daemon.runs:
        raise NetspecError(f"run {run} is live on this daemon: nothing of it was left behind")
    note = await asyncio.to_thread(leftovers.swept, session.daemon.root, run)
    if note is None:
        return k.LeftReply(swept=False)
    log.info("run %s: told what its dead daemon (pid %d) left and this one ended", run, note.pid)
    return k.LeftReply(swept=True, pid=note.pid, at_ns=note.at_ns, removed=note.removed)


HANDLERS: dict[type[k.Request], Handler] = {
    k.Hello: hello, k.Setup: setup, k.End: end, k.Reset: reset, k.Files: files,
    k.Read: read, k.Clksync: clksync, k.Shutdown: shutdown, k.Tree: tree, k.Join: join, k.Links: links,
    k.Fault: fault, k.Left: left,
}
# Requests answered as they are read, without a task of their own.
INLINE_HANDLERS: dict[type[k.Request], Callable[[Session, Any], k.Reply]] = {k.Enter: enter}
