"""One component spec for the controller and the daemon (protocol/kinds.py `ComponentSpec`):
what the experiment model builds is, field for field, what a real daemon runs."""

import asyncio
import sys

import msgspec
from netspec.controller.experiment.model import Component
from netspec.controller.hosts.fleet import DaemonClient
from netspec.daemon.server import Daemon
from netspec.protocol import messages as m
from netspec.protocol.kinds import ComponentSpec, Setup
from support import session_run_id

# Every field of the spec away from its default, so that one lost on the way is seen.
PLAIN = Component(name="plain", host="a", command=("sleep", "30"), params={"n": 1}, env={"E": "1"},
                  start="run", stop="collect")
AWARE = Component(name="aware", host="a", program="/opt/prog.py", args=("--x", "1"), params={"p": [1, 2]},
                  env={"F": "2"}, stop="collect")


def test_every_field_of_the_spec_but_the_daemons_own_argv_is_one_the_experiment_model_carries():
    # A field added to the spec and to the model reaches the daemon (Component.wire builds the
    # spec from the model's fields by name); one added to the spec alone fails here.
    assert set(ComponentSpec.__struct_fields__) - {"argv"} <= set(Component.__dataclass_fields__)
    assert Setup.__annotations__["components"] == "list[ComponentSpec]"  # what the daemon decodes
    assert type(PLAIN.wire()) is ComponentSpec and PLAIN.wire().argv == ["sleep", "30"]


def test_the_spec_a_daemon_runs_is_the_one_the_experiment_model_built(key, tmp_path):
    run = session_run_id("r-spec")

    async def scenario():
        daemon = Daemon(key, tmp_path / "droot")
        ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        async with asyncio.TaskGroup() as tg:
            tg.create_task(daemon.serve("127.0.0.1", 0, ready.set_result))
            port = await asyncio.wait_for(ready, 10)
            client = await DaemonClient.connect("a", ("127.0.0.1", port), key, lambda host, event: None)
            tg.create_task(client.serve())
            deadline = asyncio.get_running_loop().time() + 10
            await client.request(m.SETUP, deadline, run=run, host="a",
                                 components=[PLAIN.wire(), AWARE.wire()])
            held = {name: comp.spec for name, comp in daemon.runs[run].supervisor.components.items()}
            await client.request(m.RESET, deadline, clean=True)
            await client.close()
            daemon.stop()
        return held

    held = asyncio.run(scenario())
    assert held["plain"] == PLAIN.wire()
    # The daemon fills in an aware program's command line (its own interpreter for a .py).
    runs = [sys.executable, "/opt/prog.py", "--x", "1"]
    assert held["aware"] == msgspec.structs.replace(AWARE.wire(), argv=runs)
