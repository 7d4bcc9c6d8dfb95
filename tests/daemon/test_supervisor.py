"""The supervisor through a real daemon: spawn, exit reports, reset without orphans."""

import asyncio
import contextlib
import os
import signal
import sys
import time
from pathlib import Path

import psutil
from daemonview import Session
from netspec.controller.record.results import ComponentResult
from netspec.daemon.component import KILL_GRACE_S, STOP_GRACE_S, ComponentProcess
from netspec.daemon.spawn import python_argv
from netspec.daemon.supervisor import Supervisor
from netspec.datastream.reader import StreamReader
from netspec.protocol.exits import children, descendants, ending_told, run_processes
from netspec.protocol.kinds import ComponentSpec
from support import PROGRAMS, on_the_wire, session_run_id, wait_for

RUN_RESET = session_run_id("run-reset")
RUN_EXIT = session_run_id("run-exit")
RUN_MISSING = session_run_id("run-missing")
RUN_DROP = session_run_id("run-drop")
RUN_ORPHAN = session_run_id("run-orphan")
RUN_OUTSIDE = session_run_id("run-outside-sigterm")
ACTOR = {"name": "actor", "program": str(PROGRAMS / "actor.py"), "args": ["launch,work"]}


def test_reset_kills_every_process_of_the_run_and_cleans_its_work_dir(daemon, key, tmp_path):
    async def scenario():
        async with Session(daemon.port, key) as s:
            setup = await s.request("setup", run=RUN_RESET, components=[
                ACTOR, {"name": "sleeper", "argv": ["sleep", "300"], "start": "launch",
                        "stop": "work"}])
            s.client.notify("enter", phase="launch", step=0, published={},
                            components=[{"name": "actor", "params": {"orphan": True}},
                                        {"name": "sleeper"}])
            assert (await s.event("ack", "actor"))["status"] == "ok"
            assert (await s.event("ack", "sleeper"))["status"] == "ok"
            # What the reset is to end, waited for rather than read once: under load one of
            # the three was seen missing just after the acks (not yet found by the run's id
            # in its environment).
            async with asyncio.timeout(10):
                while len(run_processes(RUN_RESET)) < 3:
                    await asyncio.sleep(0.01)
            assert len(run_processes(RUN_RESET)) == 3  # actor, its orphan, sleeper
            killed = (await s.request("reset", clean=True))["killed"]
            return killed, setup["root"]
    killed, root = asyncio.run(scenario())
    assert killed == 3
    assert run_processes(RUN_RESET) == []
    assert not Path(root).exists()
    assert daemon.alive


def test_an_orphan_whose_parent_ended_is_adopted_by_the_daemon_ended_and_reaped(daemon, key):
    # The daemon is a child subreaper: a process left behind by a component that ended is
    # re-parented to it, not to init, so a reset finds it among the daemon's descendants
    # without scanning the machine, and reaps it once it is killed.
    async def scenario():
        async with Session(daemon.port, key) as s:
            await s.request("setup", run=RUN_ORPHAN, components=[
                {"name": "leaver", "argv": ["sh", "-c", "sleep 300 & echo left"], "start": "launch"}])
            s.client.notify("enter", phase="launch", step=0, published={}, components=[{"name": "leaver"}])
            assert (await s.event("ack", "leaver"))["status"] == "ok"
            left = wait_for(lambda: run_processes(RUN_ORPHAN), what="the orphan")
            assert [p.ppid() for p in left] == [daemon.proc.pid]
            assert left[0].pid in descendants(daemon.proc.pid)
            return (await s.request("reset", clean=True))["killed"]
    assert asyncio.run(scenario()) == 1
    assert run_processes(RUN_ORPHAN) == []
    assert children(daemon.proc.pid) == []  # no zombie left behind


def test_an_exit_is_reported_at_once_with_its_output_complete(daemon, key):
    async def scenario():
        async with Session(daemon.port, key) as s:
            await s.request("setup", run=RUN_EXIT, components=[
                {"name": "crash", "argv": ["sh", "-c", "echo last words; exit 5"],
                 "start": "launch", "stop": "work"}])
            s.client.notify("enter", phase="launch", step=0, published={},
                            components=[{"name": "crash"}])
            exit_event = await s.event("exit", "crash")
            output = b"".join(e["data"] for e in s.events if e["t"] == "output")
            files = (await s.request("files"))["files"]
            return exit_event, output, files
    exit_event, output, files = asyncio.run(scenario())
    assert exit_event["returncode"] == 5 and exit_event["failed"]
    assert output == b"last words\n"
    assert {f["name"] for f in files if f["component"] == "crash"} == {"stdout", "stderr", "exit.json"}


def test_a_sigterm_from_outside_is_a_failure_to_the_exit_event_the_collect_ack_and_the_result_alike(
        daemon, key):
    # Two services alike but for who sends their SIGTERM: netspec (at their stop phase), or
    # someone else mid-run. Only netspec's is a clean end, wherever the end is judged.
    def service(name):
        return {"name": name, "argv": ["sleep", "300"], "start": "launch", "stop": "work"}

    async def scenario():
        async with Session(daemon.port, key) as s:
            await s.request("setup", run=RUN_OUTSIDE, components=[service("stopped"), service("killed")])
            s.client.notify("enter", phase="launch", step=0, published={},
                            components=[{"name": "stopped"}, {"name": "killed"}])
            pid = int((await s.event("ack", "killed", step=0))["message"].removeprefix("started pid "))
            assert (await s.event("ack", "stopped", step=0))["status"] == "ok"
            os.kill(pid, signal.SIGTERM)  # from outside netspec, mid-run
            killed = await s.event("exit", "killed")
            s.client.notify("enter", phase="work", step=1, published={}, components=[{"name": "stopped"}])
            assert (await s.event("ack", "stopped", step=1))["status"] == "ok"
            stopped = await s.event("exit", "stopped")
            s.client.notify("enter", phase="collect", step=2, published={}, deadline_s=20,
                            components=[{"name": "stopped"}, {"name": "killed"}])
            acks = {name: await s.event("ack", name, step=2) for name in ("stopped", "killed")}
            await s.request("reset", clean=True)
            return {"stopped": stopped, "killed": killed}, acks
    exits, acks = asyncio.run(scenario())
    assert {name: (e["returncode"], e.get("expected", False), e["failed"]) for name, e in exits.items()} == {
        "stopped": (-signal.SIGTERM, True, False), "killed": (-signal.SIGTERM, False, True)}
    assert {name: (a["status"], a.get("message")) for name, a in acks.items()} == {
        "stopped": ("ok", None), "killed": ("error", "was killed by SIGTERM")}
    # The controller reads each end from its Exit event, by the same rule.
    results = {name: ComponentResult("h", name, ["sleep", "300"], exit_status=e["returncode"],
                                     ending=ending_told(e.get("expected", False), e["failed"]))
               for name, e in exits.items()}
    assert {name: r.ok for name, r in results.items()} == {"stopped": True, "killed": False}


def test_a_program_that_cannot_start_acks_an_error(daemon, key):
    async def scenario():
        async with Session(daemon.port, key) as s:
            await s.request("setup", run=RUN_MISSING, components=[
                {"name": "ghost", "argv": ["/nonexistent/program"]}])
            s.client.notify("enter", phase="launch", step=0, published={},
                            components=[{"name": "ghost"}])
            return await s.event("ack", "ghost")
    ack = asyncio.run(scenario())
    assert ack["status"] == "error"
    assert "cannot start '/nonexistent/program': No such file or directory" in ack["message"]


def test_a_dropped_controller_connection_kills_the_run(daemon, key):
    async def scenario():
        async with Session(daemon.port, key) as s:
            await s.request("setup", run=RUN_DROP, components=[
                {"name": "sleeper", "argv": ["sleep", "300"], "stop": "work"}])
            s.client.notify("enter", phase="launch", step=0, published={},
                            components=[{"name": "sleeper"}])
            await s.event("ack", "sleeper")
            assert len(run_processes(RUN_DROP)) == 1
    asyncio.run(scenario())
    wait_for(lambda: not run_processes(RUN_DROP), what="the daemon to kill the run")
    assert daemon.alive


RUN_HANG = session_run_id("run-hang")


def test_an_enter_left_unanswered_past_its_deadline_is_acked_as_an_error_by_the_daemon(daemon, key):
    """The controller acts at a step's deadline; if it cannot, the daemon's wait ends too."""
    async def scenario():
        async with Session(daemon.port, key) as s:
            await s.request("setup", run=RUN_HANG, components=[ACTOR])
            s.client.notify("enter", phase="launch", step=0, published={}, deadline_s=20,
                            components=[{"name": "actor", "params": {}}])
            await s.event("ack", "actor")
            s.events.clear()
            s.client.notify("enter", phase="work", step=1, published={}, deadline_s=0.2,
                            components=[{"name": "actor", "params": {"hang_in": "work"}}])
            ack = await s.event("ack", "actor")
            await s.request("reset", clean=True)
            return ack
    ack = asyncio.run(scenario())
    assert ack["status"] == "error" and ack["step"] == 1
    assert "no ack within the step's deadline of 0.2 s" in ack["message"]
    assert (ack["acked"] - ack["entered"]) / 1e9 >= 2.2
    assert not run_processes(RUN_HANG)


def test_handed_back_files_of_one_name_are_listed_under_names_of_their_own(tmp_path):
    class Nowhere:
        def emit(self, message):
            pass

        async def drain(self):
            pass

    async def listing():
        async with asyncio.TaskGroup() as tg:
            spec = ComponentSpec(name="c", argv=["true"])
            sup = Supervisor("r1", tmp_path / "root", [spec], Nowhere(), tg, host="h")
            made = []
            for where, name in (("x", "out.csv"), ("y", "out.csv"), ("z", "out csv"), ("z", "out_csv")):
                (tmp_path / where).mkdir(exist_ok=True)
                made.append(tmp_path / where / name)
                made[-1].write_text(where)
            sup.components["c"].handed_back.extend([*map(str, made), str(made[0])])
            return [f["name"] for f in sup.collectable() if f["name"].startswith("files/")]
    assert asyncio.run(listing()) == ["files/out.csv", "files/out-2.csv", "files/out_csv", "files/out_csv-2"]


RUN_RAW = session_run_id("run-raw")


def test_a_components_malformed_ack_is_its_error_and_only_what_a_component_may_say_goes_on(daemon, key):
    async def scenario():
        async with Session(daemon.port, key) as s:
            await s.request("setup", run=RUN_RAW, components=[
                {"name": "fine", "program": str(PROGRAMS / "rawack.py"),
                 "args": ['{"status": "ok", "message": "hi", "phases": 5, "clock": "x"}']},
                {"name": "odd", "program": str(PROGRAMS / "rawack.py"),
                 "args": ['{"status": "fine", "files": "x"}']}])
            s.client.notify("enter", phase="launch", step=0, published={},
                            components=[{"name": "fine"}, {"name": "odd"}])
            fine, odd = await s.event("ack", "fine"), await s.event("ack", "odd")
            await s.request("reset", clean=True)
            return fine, odd, s.client.lost
    fine, odd, lost = asyncio.run(scenario())
    # The daemon kept its connection: what it passed on is what the controller takes.
    assert lost is None
    assert fine["status"] == "ok" and fine["message"] == "hi" and "clock" not in fine
    assert odd["status"] == "error" and odd["message"].startswith(
        "the component sent an ack that does not fit: Invalid enum value 'fine' - at `$.status`")


RUN_TWICE = session_run_id("run-twice")


def test_a_command_entered_again_at_its_start_phase_is_refused_naming_it_and_the_session_lives(daemon, key):
    # [launch, run, run, collect] with a plain command that starts at `run`: it is started
    # once; the second `run` is its error ack, not a second process sharing its exit.
    async def scenario():
        async with Session(daemon.port, key) as s:
            await s.request("setup", run=RUN_TWICE,
                            components=[{"name": "once", "argv": ["true"], "start": "run"}])
            for step in (1, 2):
                s.client.notify("enter", phase="run", step=step, published={}, components=[{"name": "once"}])
                await s.event("ack", "once", step=step)
            again = await s.event("ack", "once", step=2)
            first = await s.event("ack", "once", step=1)
            hello = await s.request("hello")
            return first, again, hello, [e for e in s.events if e["t"] == "exit"], s.client.lost
    first, again, hello, exits, lost = asyncio.run(scenario())
    assert first["status"] == "ok"
    assert again["status"] == "error"
    assert again["message"].startswith("component 'once' was started in phase 'run' (pid ")
    assert again["message"].endswith("a component is started once in a run, not again in phase 'run'")
    assert len(exits) == 1 and lost is None and hello["pid"] == daemon.proc.pid


RUN_RESET_LAUNCH = session_run_id("run-reset-launch")


def test_no_component_starts_once_its_run_was_reset_and_the_session_lives(daemon, key):
    # A launch that comes after (or races) a `reset {clean: true}` starts nothing: once the
    # work directory is gone, a process started anyway had its outputs nowhere.
    async def scenario():
        async with Session(daemon.port, key) as s:
            await s.request("setup", run=RUN_RESET_LAUNCH, components=[
                {"name": "sleeper", "argv": ["sleep", "300"], "start": "launch", "stop": "work"}])
            await s.request("reset", clean=True)
            s.client.notify("enter", phase="launch", step=0, published={}, components=[{"name": "sleeper"}])
            ack = await s.event("ack", "sleeper")
            return ack, run_processes(RUN_RESET_LAUNCH), await s.request("hello"), s.client.lost
    ack, left, hello, lost = asyncio.run(scenario())
    assert ack["status"] == "error"
    assert ack["message"] == "component 'sleeper' is not started in phase 'launch': the run was reset"
    assert left == [] and lost is None and hello["pid"] > 0


class Outbox:
    """Where a supervisor in this process sends its events: kept, for the test to read."""

    def __init__(self):
        self.events: list[dict] = []

    def emit(self, message) -> None:
        self.events.append(on_the_wire(message))  # as the map it is on the wire

    async def drain(self) -> None:
        pass

    async def said(self, text: bytes) -> None:
        async with asyncio.timeout(20):
            while not any(e["t"] == "output" and text in e["data"] for e in self.events):
                await asyncio.sleep(0.01)


def _busy_once_killed(pid: int, seconds: float) -> None:
    """Keep this loop busy for `seconds` from the moment process `pid` is dead, as the exits
    of a thousand components keep a daemon's loop on a loaded machine: its exit is not
    seen before then. Until it dies, the loop runs on (this only looks, each turn)."""
    loop = asyncio.get_running_loop()

    def look() -> None:
        try:
            dead = psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            dead = True
        if not dead:
            loop.call_soon(look)
            return
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
    loop.call_soon(look)


STUBBORN = [sys.executable, "-c", "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ready', flush=True)\ntime.sleep(300)\n"]


def test_a_killed_component_is_waited_for_until_the_deadline_however_long_its_exit_takes_to_be_seen(tmp_path):
    run_id = session_run_id("run-stubborn")

    async def scenario():
        outbox = Outbox()
        async with asyncio.TaskGroup() as tg:
            spec = ComponentSpec(name="stubborn", argv=STUBBORN, stop="work")
            sup = Supervisor(run_id, tmp_path, [spec], outbox, tg)
            assert (await sup.enter("stubborn", "launch", {}, {}))["status"] == "ok"
            await outbox.said(b"ready")
            comp = sup.components["stubborn"]
            loop = asyncio.get_running_loop()
            _busy_once_killed(comp.proc.pid, KILL_GRACE_S + 0.5)
            info = await comp.stop(grace=0.2, deadline=loop.time() + 20)
            await sup.reset(clean=True)
            return info, comp.forced
    info, forced = asyncio.run(scenario())
    assert info["returncode"] == -signal.SIGKILL and forced


RUN_DAEMON_KILLED = session_run_id("run-daemon-killed")


def test_a_component_whose_daemon_is_killed_gets_sigterm_and_its_last_records_reach_its_stream(daemon, key,
                                                                                                tmp_path):
    async def scenario():
        async with Session(daemon.port, key) as s:
            # Nothing is flushed before the process ends: a record still buffered is lost to SIGKILL.
            await s.request("setup", run=RUN_DAEMON_KILLED, host="h", components=[ACTOR],
                            streams={"s": {"enable": ["PLAY"], "flush_ms": 600_000,
                                           "chunk_records": 100_000}})
            steps = ((0, "launch", {}), (1, "start_logging", {}), (2, "work", {"ticks": 5}))
            for step, phase, params in steps:
                s.client.notify("enter", phase=phase, step=step, published={},
                                components=[{"name": "actor", "params": params}])
                assert (await s.event("ack", "actor", step=step))["status"] == "ok"
            daemon.proc.kill()
            daemon.proc.wait(timeout=20)
    asyncio.run(scenario())
    wait_for(lambda: not run_processes(RUN_DAEMON_KILLED), what="the actor to end with its daemon")
    (stream,) = (tmp_path / "droot" / RUN_DAEMON_KILLED / "streams").glob("s.actor.*.ds")
    reader = StreamReader(stream)
    assert [r.tag for r in reader if r.entity.full_name == "PLAY/tick"] == [0, 1, 2, 3, 4]
    assert reader.closed_cleanly


RUN_IDLE_IGNORER = session_run_id("run-idle-ignorer")


def test_a_command_that_ignores_sigterm_and_sits_idle_is_killed_after_the_grace_not_at_the_deadline(
        daemon, key):
    async def scenario():
        async with Session(daemon.port, key) as s:
            await s.request("setup", run=RUN_IDLE_IGNORER, components=[
                {"name": "stubborn", "argv": STUBBORN, "start": "launch", "stop": "work"}])
            s.client.notify("enter", phase="launch", step=0, published={}, components=[{"name": "stubborn"}])
            assert (await s.event("ack", "stubborn", step=0))["status"] == "ok"
            await s.event("output", "stubborn")  # 'ready': its SIGTERM is ignored from now on
            s.client.notify("enter", phase="work", step=1, published={}, deadline_s=60,
                            components=[{"name": "stubborn"}])
            ack = await s.event("ack", "stubborn", step=1)
            return ack, await s.event("exit", "stubborn")
    ack, exit_event = asyncio.run(scenario())
    assert (ack["status"], ack["message"]) == ("warning", f"killed: idle {STOP_GRACE_S:g} s after SIGTERM")
    assert STOP_GRACE_S <= (ack["acked"] - ack["entered"]) / 1e9 < STOP_GRACE_S + 10  # the deadline: 60 s
    assert exit_event["returncode"] == -signal.SIGKILL


RUN_WRAPS_UP = session_run_id("run-wraps-up")
WORK_AT_END_S = STOP_GRACE_S + 2
# A NETSPEC-aware program that wraps up once told to stop, with more CPU work than the stop
# grace allows: as a fleet's components, ending at once on two cores, each take longer than
# any fixed grace to end.
WRAPS_UP = ["-c", "import time\nfrom netspec import nodelib\nnodelib.run()\n"
            f"end = time.monotonic() + {WORK_AT_END_S}\nwhile time.monotonic() < end:\n    pass\n"]


def test_a_component_at_work_on_its_end_longer_than_the_stop_grace_is_waited_for_and_ends_cleanly(
        daemon, key):
    async def scenario():
        async with Session(daemon.port, key) as s:
            await s.request("setup", run=RUN_WRAPS_UP, components=[
                {"name": "wrapper", "program": sys.executable, "args": WRAPS_UP}])
            s.client.notify("enter", phase="launch", step=0, published={}, components=[{"name": "wrapper"}])
            assert (await s.event("ack", "wrapper", step=0))["status"] == "ok"
            s.client.notify("enter", phase="collect", step=1, published={}, deadline_s=60,
                            components=[{"name": "wrapper"}])
            async with asyncio.timeout(60):
                ack = await s.event("ack", "wrapper", step=1)
            return ack, await s.event("exit", "wrapper")
    ack, exit_event = asyncio.run(scenario())
    assert exit_event["returncode"] == 0 and exit_event["expected"]
    assert ack["status"] == "ok"
    assert (ack["acked"] - ack["entered"]) / 1e9 >= WORK_AT_END_S


def test_a_component_whose_with_fails_is_killed_reaped_and_reported_and_leaves_no_fd(tmp_path):
    program = str(PROGRAMS / "actor.py")
    spec = ComponentSpec(name="actor", program=program, args=["launch"],
                         argv=python_argv(program, ["launch"]))
    fds = set(os.listdir("/proc/self/fd"))

    async def scenario():
        outbox = Outbox()
        async with asyncio.TaskGroup() as tg:  # its pumps, its channel's reader, its exit's watcher
            comp = ComponentProcess(spec, session_run_id("run-with"), tmp_path, outbox, lambda *claim: None)
            with contextlib.suppress(RuntimeError):
                async with comp:
                    await comp.start(tg, "launch")
                    assert "launch" in await comp.registered
                    raise RuntimeError("the step failed")
            assert comp.channel is not None and comp.channel.closing
        return comp.proc.pid, comp.exited.result(), [e for e in outbox.events if e["t"] == "exit"]
    pid, info, exits = asyncio.run(scenario())
    assert info["returncode"] == -signal.SIGKILL and info["expected"]
    assert len(exits) == 1 and not exits[0]["failed"]
    assert not psutil.pid_exists(pid)  # reaped, not a zombie
    assert set(os.listdir("/proc/self/fd")) == fds
