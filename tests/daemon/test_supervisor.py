"""The supervisor through a real daemon: spawn, exit reports, reset without orphans."""

import asyncio
from pathlib import Path

from netspec.controller.fleet import DaemonClient
from netspec.daemon.supervisor import ComponentSpec, Supervisor
from netspec.protocol.exits import children, descendants, run_processes
from support import PROGRAMS, session_run_id, wait_for


class Session:
    """A controller's view of one daemon: requests plus every event that arrived."""

    def __init__(self, port: int, key: bytes):
        self.port, self.key = port, key
        self.events: list[dict] = []
        self.arrived = asyncio.Event()

    def on_event(self, host: str, event: dict) -> None:
        self.events.append(event)
        self.arrived.set()

    async def __aenter__(self):
        self.client = await DaemonClient.connect("t", ("127.0.0.1", self.port), self.key,
                                                 self.on_event)
        self.serving = asyncio.create_task(self.client.serve())
        return self

    async def __aexit__(self, *exc):
        await self.client.close()
        await self.serving

    async def request(self, kind: str, **fields):
        return await self.client.request(kind, asyncio.get_running_loop().time() + 20, **fields)

    async def event(self, kind: str, component: str) -> dict:
        async with asyncio.timeout(20):
            while True:
                for e in self.events:
                    if e["t"] == kind and e.get("component") == component:
                        return e
                self.arrived.clear()
                await self.arrived.wait()


RUN_RESET = session_run_id("run-reset")
RUN_EXIT = session_run_id("run-exit")
RUN_MISSING = session_run_id("run-missing")
RUN_DROP = session_run_id("run-drop")
RUN_ORPHAN = session_run_id("run-orphan")
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
            spec = ComponentSpec.from_wire({"name": "c", "argv": ["true"]})
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
        "the component sent an ack whose status and files are malformed")
