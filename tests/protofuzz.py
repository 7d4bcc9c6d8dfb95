"""A stateful protocol fuzz of a real netspecd, shared by tests/daemon/test_fuzz_protocol.py
and bench/fuzz.py.

`Fuzz` (over tests/protoclient.py's `Client`, which can write frames in the same segment as
the auth frame, sealed or not, or one unsealed after it) is a seeded state machine over
every request type and sequences of them (setup, join, tree, enter, end, reset, files, read,
clksync, hang-ups; repeated and out of order) on a few sessions at once, and checks after
every action what must hold:

- the daemon lives;
- every request with an id is answered, or its connection dropped, within HANG_S; a session
  that sent only valid requests is never dropped;
- no frame after the auth frame is executed unless it carries its seal;
- a session's run is acted on by that session alone, and when it ends, however it ends, no
  process of its run is left and its run id can be set up again (no run held);
- the daemon burns no CPU once every request is answered (no relay loop), and its RSS stays
  within RSS_BOUND_MB of where it started;
- once every session is gone, its fds, threads and child processes are back to baseline.

Each broken rule is a `Finding`, named by its kind and the actions that led to it. Traffic
goes to 127.0.0.1 only; every wait has a deadline.
"""

from __future__ import annotations

import os
import random
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import psutil
from netspec.protocol.wire import HEADER, encode
from protoclient import (
    HANG_S,
    Client,
    Daemon,
    Dropped,
    Hang,
    empty_arrays_frame,
    mutated_request,
    refused,
)

TRAIL = 8  # actions shown before a finding
RUN_END_S = 10.0  # a run's processes gone after its session ended
QUIET_WINDOW_S = 0.5
# Of one core, over QUIET_WINDOW_S once every request is answered: an idle daemon takes none
# (a relay loop took 36 % of a core on two loaded cores, 75-100 % on an idle machine).
SPIN_SHARE = 0.15
RSS_BOUND_MB = 128.0
ENTER_DEADLINE_S = 3
ACK_SLACK_S = 2.0 + 5.0  # the daemon's own grace past the step's deadline, and some
THREAD_CEILING = 2 + min(32, (os.cpu_count() or 1) + 4)  # main, flusher, an idle executor's workers


@dataclass
class Finding:
    kind: str  # crash, hang, dropped, unsealed, isolation, run-held, spin, rss, leak, accepted
    what: str
    trail: list[str] = field(default_factory=list)

    def line(self) -> str:
        trail = " -> ".join(self.trail[-TRAIL:])
        return f"[{self.kind}] {self.what}" + (f"\n      after: {trail}" if trail else "")


@dataclass
class Session:
    """What the fuzz knows of one of its connections."""

    client: Client
    name: str
    run: str | None = None  # the run it set up (and so owns)
    components: list[str] = field(default_factory=list)
    running: dict[str, int] = field(default_factory=dict)  # a long component it started -> its pid
    launching: set[int] = field(default_factory=set)  # steps whose ack says which pid it started
    joined: str | None = None
    valid: bool = True  # every request it sent was well formed
    pending: dict[int, float] = field(default_factory=dict)  # request id -> when sent
    acks_due: dict[int, tuple[int, float]] = field(default_factory=dict)  # step -> (acks, by when)
    acks: dict[int, int] = field(default_factory=dict)
    trail: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    served_port: int | None = None
    phase: int = -1  # where it is in LIFECYCLE

    def forget(self) -> None:
        """What it started may have been stopped by its own request: watch it no longer."""
        self.running.clear()
        self.launching.clear()


COMPONENTS = {
    # a long-lived plain command: started at launch, stopped at collect
    "sleeper": {"argv": ["sleep", "60"], "stop": "collect"},
    # a plain command that starts at `run` and runs to its end: [launch, run, run, collect]
    "late": {"argv": ["true"], "start": "run"},
    "oneshot": {"argv": ["true"]},
}
LIFECYCLE = ["launch", "start_logging", "run", "stop_logging", "collect"]
PHASES = ["launch", "launch", "run", "run", "collect", "start_logging", "stop_logging", "sync_clocks",
          "fz-phase"]
ACTIONS = {  # action -> weight
    "connect": 3, "hello": 1, "setup": 3, "enter": 20, "tree": 2, "tree_enter": 2, "join": 2,
    "reset": 1, "end": 2, "files": 2, "read": 1, "clksync": 2, "burst": 2, "hang_up": 1,
    "mutated": 2, "unsealed": 1, "garbage": 1, "coalesced": 1, "half_open": 1, "big_frame": 0,
}


class Fuzz:
    """The state machine: `step()` takes one action, chosen by the seeded `rng` among those
    that make sense now, then checks every invariant that action may have broken."""

    def __init__(self, daemon: Daemon, key: bytes, rng: random.Random, tag: str, max_sessions: int = 3,
                 weights: dict[str, int] | None = None, run_end_s: float = RUN_END_S):
        self.daemon, self.key, self.rng, self.tag = daemon, key, rng, tag
        self.run_end_s = run_end_s
        self.max_sessions = max_sessions
        self.weights = {**ACTIONS, **(weights or {})}
        self.sessions: list[Session] = []
        self.ended: dict[str, tuple[float, list[str]]] = {}  # run id -> (when its session ended, trail)
        self.findings: list[Finding] = []
        self.seen: set[tuple[str, str]] = set()
        self.counts = {"actions": 0, "frames": 0, "sessions": 0, "answered": 0, "dropped": 0}
        self._warm_up()
        self.held_start = daemon.held()
        self.runs_made = 0
        # Each run's join token: a parent shows it to join (protocol 8). A run a session joined
        # with it is entered by that parent as its controller's would be: not a finding.
        self.tokens: dict[str, bytes] = {}
        self.parented: set[str] = set()
        self.half_open: list[socket.socket] = []
        self.spin = 0.0  # the most CPU share seen with every request answered

    def _warm_up(self) -> None:
        """A run's whole course once, not counted: what a daemon opens on its first use (its
        executor's threads, the clock service) is in the baseline, not a leak."""
        run = f"fz-{self.tag}-warm"
        try:
            client = Client(self.daemon.port, self.key)
            client.ask("setup", {"run": run, "host": "h", "camp": None,
                                 "components": [{"name": n, **c} for n, c in COMPONENTS.items()]})
            for step, phase in enumerate(LIFECYCLE):
                client.ask("enter", {"phase": phase, "step": step, "deadline_s": ENTER_DEADLINE_S,
                                     "published": {}, "components": [{"name": n} for n in COMPONENTS]})
            client.ask("clksync", {"role": "serve", "key": os.urandom(16), "timestamps": "user"})
            client.ask("reset", {"clean": True})
            client.close()
        except (Dropped, Hang, OSError):
            pass  # said by the fuzz itself, if it matters
        deadline = time.monotonic() + self.run_end_s
        while self.daemon.run_processes(run) and time.monotonic() < deadline:
            time.sleep(0.05)

    # -- findings

    def find(self, kind: str, what: str, trail: list[str] | None = None) -> None:
        if (kind, what) in self.seen:
            return
        self.seen.add((kind, what))
        self.findings.append(Finding(kind, what, list(trail or [])))

    # -- the machine

    def step(self) -> None:
        if not self.daemon.alive:
            return
        names = [a for a, w in self.weights.items() if w > 0 and self._possible(a)]
        action = self.rng.choices(names, [self.weights[a] for a in names])[0]
        self.counts["actions"] += 1
        session = None if action in ("connect", "coalesced", "half_open") else self.rng.choice(self.sessions)
        try:
            getattr(self, f"_{action}")(session) if session is not None else getattr(self, f"_{action}")()
        except Dropped as exc:
            if session is not None:
                self._lost(session, f"{action}: {exc}")
        if session is not None and session in self.sessions:
            self._settle(session)
        self.check()
        if action in ("tree", "tree_enter"):
            self.quiet()  # a relayed step answered: nothing left to do

    def _possible(self, action: str) -> bool:
        if action in ("connect", "coalesced"):
            return len(self.sessions) < self.max_sessions
        if action == "half_open":
            return len(self.half_open) < 8
        return bool(self.sessions)

    def _connect(self, extra: Any = None, who: str = "a controller with the key") -> Session | None:
        try:
            client = Client(self.daemon.port, self.key, extra)
        except (Dropped, Hang, OSError) as exc:
            self.find("refused", f"{who} could not connect: {exc}")
            return None
        self.counts["sessions"] += 1
        session = Session(client, f"s{self.counts['sessions']}")
        self.sessions.append(session)
        return session

    def _note(self, session: Session, text: str) -> None:
        session.trail.append(f"{session.name}:{text}")
        self.counts["frames"] += 1

    def _request(self, session: Session, t: str, fields: dict[str, Any] | None = None) -> int:
        rid = session.client.send(t, fields)
        assert rid is not None
        session.pending[rid] = time.monotonic()
        self._note(session, t + (f"({_short(fields)})" if fields else ""))
        return rid

    def _answer(self, session: Session, rid: int, timeout: float = HANG_S) -> dict[str, Any] | None:
        """The answer to `rid`, or None if the session was lost or the request hung (said)."""
        try:
            session.client.wait({rid}, time.monotonic() + timeout)
        except Hang:
            self.find("hang", f"request {session.trail[-1].split(':', 1)[-1][:60]} unanswered after "
                      f"{timeout:g} s", session.trail)
            self._hang_up(session, said=False)
            return None
        except Dropped as exc:
            self._lost(session, str(exc))
            return None
        session.pending.pop(rid, None)
        self.counts["answered"] += 1
        return session.client.replies.pop(rid)

    def _settle(self, session: Session) -> None:
        """Every request of the session answered, or a finding; acks counted as they come."""
        try:
            session.client.poll()
            session.client.wait(set(session.pending), time.monotonic() + HANG_S)
        except Hang:
            self.find("hang", f"{len(session.pending)} request(s) unanswered after {HANG_S:g} s",
                      session.trail)
            self._hang_up(session, said=False)
            return
        except Dropped as exc:
            self._lost(session, str(exc))
            return
        for rid in list(session.pending):
            session.client.replies.pop(rid, None)
            session.pending.pop(rid)
            self.counts["answered"] += 1
        self._count_acks(session)

    def _count_acks(self, session: Session) -> None:
        for event in session.client.events:
            if event.get("t") == "ack" and isinstance(event.get("step"), int):
                session.acks[event["step"]] = session.acks.get(event["step"], 0) + 1
                started = str(event.get("message", ""))
                if (event["step"] in session.launching and event.get("component") == "sleeper"
                        and started.startswith("started pid ")):
                    session.running["sleeper"] = int(started.split()[-1])
        session.client.events.clear()
        now = time.monotonic()
        for step, (expected, due) in list(session.acks_due.items()):
            if session.acks.get(step, 0) >= expected:
                del session.acks_due[step]
            elif now > due:
                del session.acks_due[step]
                self.find("hang", f"enter of step {step}: {session.acks.get(step, 0)} of {expected} acks "
                          f"after {ENTER_DEADLINE_S + ACK_SLACK_S:g} s", session.trail)

    def _lost(self, session: Session, why: str) -> None:
        """The daemon ended the session, whose every frame was sealed and whole: a request
        it cannot take is refused, and the session goes on."""
        self.counts["dropped"] += 1
        what = "valid requests" if session.valid else "sealed frames (some requests malformed)"
        self.find("dropped", f"a session of {what} was dropped ({why[:80]})", session.trail)
        self._hang_up(session, said=False)

    # -- actions: sessions

    def _hang_up(self, session: Session, said: bool = True) -> None:
        if said:  # alive until it hangs up: its last hello is answered
            rid = self._request(session, "hello")
            if self._answer(session, rid) is None:
                return  # said, and hung up
            self._note(session, "hang-up")
        session.client.close()
        if session in self.sessions:
            self.sessions.remove(session)
        if session.run is not None:
            self.ended[session.run] = (time.monotonic(), list(session.trail))

    def _hello(self, session: Session) -> None:
        self._request(session, "hello")

    def _new_run(self) -> str:
        self.runs_made += 1
        return f"fz-{self.tag}-{self.runs_made}"

    def _setup(self, session: Session) -> None:
        rng = self.rng
        run = session.run if session.run and rng.random() < 0.3 else self._new_run()
        names = (sorted(COMPONENTS) if rng.random() < 0.6
                 else rng.sample(sorted(COMPONENTS), rng.randrange(0, len(COMPONENTS) + 1)))
        comps = [{"name": n, **COMPONENTS[n]} for n in names]
        if rng.random() < 0.05:
            comps.append({"name": "netspecd", "argv": ["true"]})  # the daemon's own name: refused
        token = os.urandom(16)
        # Mostly shared: the fuzz's sessions are many controllers on one host at once.
        rid = self._request(session, "setup", {"run": run, "host": "h", "components": comps, "camp": None,
                                               "share": rng.random() < 0.9, "join_token": token})
        session.forget()  # a setup resets the session's run first
        answer = self._answer(session, rid)
        if answer is None:
            return
        if any(c["name"] == "netspecd" for c in comps):
            if refused(answer) is None:
                self.find("accepted", "setup accepted a component named 'netspecd' (it never starts)",
                          session.trail)
            return
        if refused(answer) is not None:
            return
        if session.run is not None and session.run != run:
            self.ended[session.run] = (time.monotonic(), list(session.trail))  # set up over: reset
        session.run, session.components, session.joined, session.phase = run, names, None, -1
        self.tokens[run] = token
        self.parented.discard(run)
        session.forget()
        session.acks_due.clear()
        self.ended.pop(run, None)

    def _enter_fields(self, session: Session) -> tuple[dict[str, Any], list[str]]:
        rng = self.rng
        pool = [*session.components, "netspecd"] + (["fz-nobody"] if rng.random() < 0.1 else [])
        names = pool[:-1] if rng.random() < 0.5 else rng.sample(pool, rng.randrange(0, len(pool) + 1))
        # Mostly a run's own course, one phase after the other; else the last phase again,
        # or any phase: repeated and out of order.
        pick = rng.random()
        if pick < 0.6:
            session.phase = (session.phase + 1) % len(LIFECYCLE)
            phase = LIFECYCLE[session.phase]
        elif pick < 0.8:
            phase = LIFECYCLE[session.phase]
        else:
            phase = rng.choice(PHASES)
        step = self.counts["actions"]
        params = {"wait_s": 0.1} if phase == "sync_clocks" else {}
        return ({"phase": phase, "step": step, "deadline_s": ENTER_DEADLINE_S,
                 "components": [{"name": n, "params": params} for n in names], "published": {}}, names)

    def _enter(self, session: Session) -> None:
        fields, names = self._enter_fields(session)
        with_id = self.rng.random() < 0.7
        if with_id:
            rid = self._request(session, "enter", fields)
        else:
            session.client.send("enter", fields, with_id=False)
            self._note(session, f"enter({_short(fields)})")
            rid = None
        phase = fields["phase"]
        if session.run is not None and session.joined is None and "fz-nobody" not in names:
            session.acks_due[fields["step"]] = (len(names), time.monotonic() + ENTER_DEADLINE_S + ACK_SLACK_S)
            if phase == "launch" and "sleeper" in names:
                session.launching.add(fields["step"])
            if phase == "collect" and "sleeper" in names:
                session.forget()
        if rid is not None:
            answer = self._answer(session, rid)
            if answer is not None and refused(answer) is not None:
                session.acks_due.pop(fields["step"], None)

    def _tree(self, session: Session) -> None:
        rng = self.rng
        pick = rng.randrange(3)
        if pick == 0:  # this daemon as its own child
            children = [{"host": "h2", "address": ["127.0.0.1", self.daemon.port], "hosts": ["h2"]}]
        elif pick == 1:  # nobody listens there
            children = [{"host": "h3", "address": ["127.0.0.1", 1], "hosts": ["h3"]}]
        else:
            children = []
        rid = self._request(session, "tree", {"children": children})
        answer = self._answer(session, rid)
        if answer is not None and answer.get("children"):
            self._tree_enter(session)  # a step through the tree just made

    def _tree_enter(self, session: Session) -> None:
        fields, _ = self._enter_fields(session)
        comps = fields.pop("components")
        hosts = {"h": 0, **({"h2": 0} if self.rng.random() < 0.8 else {})}
        fields.update(hosts=hosts, lists=[comps], summarize=self.rng.random() < 0.5)
        session.forget()
        rid = self._request(session, "enter", fields)
        self._answer(session, rid)

    def _join(self, session: Session) -> None:
        others = [s.run for s in self.sessions if s.run and s is not session]
        run = self.rng.choice([session.run or "fz-none", *others, "fz-no-such-run"])
        token = self.tokens.get(run, b"") if self.rng.random() < 0.7 else os.urandom(16)
        host = "h" if self.rng.random() < 0.8 else "fz-elsewhere"
        rid = self._request(session, "join", {"run": run, "host": host, "token": token})
        answer = self._answer(session, rid)
        if answer is not None and refused(answer) is None:
            session.joined = run
            self.parented.add(run)

    def _reset(self, session: Session) -> None:
        rid = self._request(session, "reset", {"clean": self.rng.random() < 0.5})
        if self._answer(session, rid) is not None:
            session.forget()
            session.acks_due.clear()

    def _end(self, session: Session) -> None:
        name = self.rng.choice([*session.components, "fz-nobody"])
        rid = self._request(session, "end", {"component": name})
        if self._answer(session, rid) is not None:
            session.forget()

    def _files(self, session: Session) -> None:
        rid = self._request(session, "files")
        answer = self._answer(session, rid)
        if answer is not None and refused(answer) is None and isinstance(answer.get("files"), list):
            session.files = [f["path"] for f in answer["files"]
                             if isinstance(f, dict) and not f.get("missing")]

    def _read(self, session: Session) -> None:
        path = self.rng.choice([*session.files, "/etc/hostname", "../../etc/passwd"])
        self._request(session, "read", {"path": path, "offset": self.rng.choice([0, 1, 2**40, -1]),
                                        "size": self.rng.choice([16, 4 << 20, 1 << 40])})

    def _clksync(self, session: Session) -> None:
        rng = self.rng
        key = os.urandom(16)
        if rng.random() < 0.5 or session.served_port is None:
            rid = self._request(session, "clksync", {"role": "serve", "key": key,
                                                     "timestamps": rng.choice(["kernel", "user"])})
            answer = self._answer(session, rid)
            if answer is not None and isinstance(answer.get("port"), int):
                session.served_port = answer["port"]
            return
        self._request(session, "clksync", {
            "role": "probe", "peer": "fz", "address": "127.0.0.1", "port": session.served_port, "key": key,
            "timestamps": "user", "interval_ms": rng.choice([200, 1000, 10**15, -5, 0])})

    def _burst(self, session: Session) -> None:
        """Requests one after the other without waiting, in any order."""
        for _ in range(self.rng.randrange(2, 8)):
            action = self.rng.choice(["hello", "files", "reset", "enter", "join", "setup", "end"])
            if action in ("hello", "files"):
                self._request(session, action)
            elif action == "reset":
                self._request(session, "reset", {"clean": False})
                session.forget()
                session.acks_due.clear()
            elif action == "enter":
                fields, _ = self._enter_fields(session)
                self._request(session, "enter", fields)
            elif action == "join":
                self._request(session, "join", {"run": session.run or "fz-none", "host": "h",
                                                "token": self.tokens.get(session.run or "", b"")})
            elif action == "end":
                self._request(session, "end", {"component": self.rng.choice([*session.components, "x"])})
            else:
                self._request(session, "setup", {"run": session.run or self._new_run(), "host": "h",
                                                 "components": [], "camp": None, "share": True})
        session.acks_due.clear()  # which enter's acks are due is not known in a burst
        session.forget()  # nor whether one of them stopped its own component

    def _mutated(self, session: Session) -> None:
        session.valid = False
        session.forget()  # a mutated reset, setup or enter may stop its own component
        message = mutated_request(self.rng, session.client.next_id + 1)
        try:
            frame = session.client.sealed(message)
        except Exception:
            return  # too big for a frame: refused on this side, as it should be
        session.client.next_id += 1
        session.client.write(frame)
        self._note(session, f"mutated {message['t']}")
        if message.get("id") == session.client.next_id:
            session.pending[message["id"]] = time.monotonic()

    def _unsealed(self, session: Session) -> None:
        """A frame without its seal after the handshake: the connection must end, unexecuted."""
        session.valid = False
        marker = 900_000 + self.counts["actions"]
        self._note(session, "unsealed hello")
        session.client.write(encode({"t": "hello", "id": marker}))
        try:
            session.client.wait({marker}, time.monotonic() + HANG_S)
        except Hang:
            self.find("hang", "an unsealed frame after the handshake neither dropped nor refused",
                      session.trail)
        except Dropped:
            pass
        else:
            self.find("unsealed", "a frame without its seal after the handshake was executed", session.trail)
        self._hang_up(session, said=False)

    def _garbage(self, session: Session) -> None:
        session.valid = False
        self._note(session, "garbage")
        pick = self.rng.randrange(3)
        data = (HEADER.pack(64 << 20) + b"x" * 64 if pick == 0
                else HEADER.pack(40) + os.urandom(40) if pick == 1 else os.urandom(self.rng.randrange(1, 64)))
        session.client.write(data)
        if pick < 2:  # a bad length or a bad MAC: the connection must end
            try:
                session.client.wait({-1}, time.monotonic() + HANG_S)
            except Hang:
                self.find("hang", "a frame failing its MAC or its limit left the connection open",
                          session.trail)
            except Dropped:
                pass
        self._hang_up(session, said=False)

    def _big_frame(self, session: Session) -> None:
        rid = session.client.next_id = session.client.next_id + 1
        session.client.write(empty_arrays_frame(session.client, rid))
        session.pending[rid] = time.monotonic()
        self._note(session, "hello(3.8 MiB of empty arrays)")

    def _coalesced(self) -> None:
        """Frames in the same segment as the auth frame: sealed ones must be served, and
        unsealed ones never executed."""
        rng = self.rng
        run = self._new_run()
        attack = rng.random() < 0.5
        marker = 800_000 + self.counts["actions"]

        def extra(client: Client) -> bytes:
            frames = [{"t": "setup", "id": marker, "run": run, "host": "h", "components": [], "camp": None},
                      {"t": "hello", "id": marker + 1}]
            if attack:
                return b"".join(encode(f) for f in frames)
            client.next_id = marker + 1
            return b"".join(client.sealed(f) for f in frames)
        session = self._connect(extra, "a controller whose first sealed requests came with its auth frame"
                                if not attack else "a controller")
        if session is None:
            return
        self._note(session, f"coalesced {'unsealed' if attack else 'sealed'} setup+hello with auth")
        if not attack:
            session.pending.update({marker: time.monotonic(), marker + 1: time.monotonic()})
            session.run = run
            return
        session.valid = False
        try:
            # In order behind what came before: by the time reset and files are answered,
            # an unsealed setup that was taken has run (reset waits for it).
            client = session.client
            client.wait({client.send("reset", {"clean": False})}, time.monotonic() + HANG_S)
            files = client.send("files")
            client.wait({files}, time.monotonic() + HANG_S)
        except (Dropped, Hang):
            self._hang_up(session, said=False)
            return
        if (refused(client.replies[files]) is None or marker in client.replies
                or marker + 1 in client.replies):
            self.find("unsealed", "frames written with the auth frame were executed without their seal",
                      session.trail)
            session.run = run
        self._hang_up(session, said=False)

    def _half_open(self) -> None:
        """A connection left in its handshake, for as long as the daemon keeps it."""
        try:
            sock = socket.create_connection(("127.0.0.1", self.daemon.port), timeout=HANG_S)
        except OSError:
            return
        self.half_open.append(sock)
        self.counts["frames"] += 1

    # -- invariants

    def check(self) -> None:
        """What must hold after every action."""
        if not self.daemon.alive:
            trail = self.sessions[0].trail if self.sessions else []
            self.find("crash", f"the daemon died (exit {self.daemon.proc.returncode}): "
                      + " | ".join(self.daemon.log_tail(3)), trail)
            return
        held = self.daemon.held()
        if held["rss_mb"] - self.held_start["rss_mb"] > RSS_BOUND_MB:
            self.find("rss", f"RSS grew {held['rss_mb'] - self.held_start['rss_mb']:.0f} MB "
                      f"(bound {RSS_BOUND_MB:g})", self._last_trail())
        for session in list(self.sessions):
            self._isolated(session)
        self._runs_ended(wait=False)

    def _last_trail(self) -> list[str]:
        """The last few actions of every session."""
        return [t for s in self.sessions for t in s.trail[-3:]]

    def _isolated(self, session: Session) -> None:
        """A long component this session started, and did not stop, still runs: no other
        session's request ended it."""
        if session.joined is not None or session.run in self.parented:
            session.forget()
        for name, pid in list(session.running.items()):
            try:
                alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                alive = False
            if not alive:
                others = [s.trail[-1] for s in self.sessions if s is not session and s.trail]
                self.find("isolation", f"run {session.run}: component {name} ended by no request of its "
                          f"session (the other sessions' last: {others[:3]})", session.trail)
                del session.running[name]

    def _runs_ended(self, wait: bool) -> None:
        """Each run whose session ended: no process left once run_end_s passed, and its id free."""
        now = time.monotonic()
        for run, (when, trail) in list(self.ended.items()):
            if any(s.run == run for s in self.sessions):
                del self.ended[run]  # set up again meanwhile
                continue
            if not wait and now < when + self.run_end_s:
                continue
            deadline = when + self.run_end_s
            while self.daemon.run_processes(run) and time.monotonic() < deadline:
                time.sleep(0.05)
            left = self.daemon.run_processes(run)
            del self.ended[run]
            if left:
                self.find("run-held", f"run {run}: {len(left)} process(es) alive {self.run_end_s:g} s "
                          "after its session ended", trail)
            if not self._free(run):
                self.find("run-held", f"run {run}: its id refused to a new session after its own ended",
                          trail)

    def _free(self, run: str) -> bool:
        try:
            probe = Client(self.daemon.port, self.key)
        except (Dropped, Hang, OSError):
            return True  # said by the connect checks
        try:
            answer = probe.ask("setup", {"run": run, "host": "h", "components": [], "camp": None})
            return refused(answer) is None or "set up by another" not in (refused(answer) or "")
        except (Dropped, Hang):
            return True
        finally:
            probe.close()

    def quiet(self) -> None:
        """Every request answered: the daemon must be idle now (no relay loop)."""
        for session in list(self.sessions):
            self._settle(session)
        if not self.daemon.alive:
            return
        before, t0 = self.daemon.cpu_s(), time.monotonic()
        time.sleep(QUIET_WINDOW_S)
        share = (self.daemon.cpu_s() - before) / (time.monotonic() - t0)
        self.spin = max(self.spin, share)
        if share > SPIN_SHARE:
            self.find("spin", f"the daemon used over {SPIN_SHARE:.0%} of a core with every request "
                      f"answered (first {share:.0%})" if "spin" not in digest(self.findings) else
                      f"the daemon used over {SPIN_SHARE:.0%} of a core again", self._last_trail())

    def finish(self) -> dict[str, float]:
        """End every session, check that nothing is held, and return the leaks."""
        self.quiet()
        for session in list(self.sessions):
            self._hang_up(session)
        for sock in self.half_open:
            sock.close()
        self.half_open.clear()
        if not self.daemon.alive:
            self.check()
            return {}
        self._runs_ended(wait=True)
        start = self.held_start
        deadline = time.monotonic() + self.run_end_s
        while True:
            held = self.daemon.held()
            leaks = {"fds": held["fds"] - start["fds"], "children": held["children"] - start["children"],
                     "threads": max(held["threads"] - max(THREAD_CEILING, start["threads"]), 0)}
            if all(v <= 0 for v in leaks.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        for kind, n in leaks.items():
            if n > 0:
                self.find("leak", f"{n} {kind} more than before, {self.run_end_s:g} s after every session "
                          "ended")
        self.check()
        return {**leaks, "rss_mb": held["rss_mb"] - start["rss_mb"]}


def _short(fields: dict[str, Any]) -> str:
    text = ",".join(f"{k}={v}" for k, v in fields.items() if k not in ("camp", "published", "deadline_s"))
    return text if len(text) < 70 else text[:67] + "..."


def digest(findings: list[Finding]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.kind] = counts.get(f.kind, 0) + 1
    return counts
