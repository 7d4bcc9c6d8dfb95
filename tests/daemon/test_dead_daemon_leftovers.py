"""What a run leaves when its daemon is SIGKILLed mid-phase (its partition's nftables table,
a component a pause fault left stopped) is ended by the next daemon started on the host,
from the record the first kept on disk, and said in its log; a record whose daemon is alive
is left alone."""

import json
import os
import signal
import subprocess
import sys
import textwrap

from netspec.daemon import leftovers
from netspec.links import names
from netspec.protocol.exits import kill_run_processes
from support import session_run_id

# In a network namespace of the test's own (tests/links/conftest.py's veth_netns): a daemon
# set up with one component held in phase `work` (waiter.py), a partition toward 10.250.77.2
# and a pause of the component done by its faults, then SIGKILLed; what it left; a second
# daemon started on the same root; what is left then, and what the second said. As JSON.
KILLED_MID_PHASE = textwrap.dedent("""\
    import asyncio, contextlib, json, os, select, signal, subprocess, sys, time
    from pathlib import Path
    import psutil
    from netspec.controller.hosts.fleet import DaemonClient
    from netspec.protocol.auth import load_or_create_key
    from netspec.protocol.exits import run_processes

    work, run_id, waiter = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    key_file = work / "key"
    key = load_or_create_key(key_file)

    def start(name):
        log = open(work / name, "w")
        proc = subprocess.Popen([sys.executable, "-m", "netspec.daemon.main", "--listen", "127.0.0.1:0",
                                 "--announce", "--root", str(work / "droot"), "--key", str(key_file)],
                                stdout=subprocess.PIPE, stderr=log, text=True)
        if not select.select([proc.stdout], [], [], 60)[0]:
            raise SystemExit("netspecd did not announce its port within 60 s")
        return proc, json.loads(proc.stdout.readline())["port"]

    def state():
        tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
        procs = {p.pid: p.status() for p in run_processes(run_id)}
        return {"tables": tables, "statuses": sorted(procs.values())}

    async def drive(port):
        done, events = asyncio.Event(), []
        def on_event(host, event):
            events.append(event)
            done.set()
        async def wait(what):  # an event, or a file the component made: looked at each 20 ms
            async with asyncio.timeout(30):
                while not what():
                    done.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(done.wait(), 0.02)
        client = await DaemonClient.connect("a", ("127.0.0.1", port), key, on_event)
        serving = asyncio.create_task(client.serve())
        deadline = asyncio.get_running_loop().time() + 30
        await client.request("setup", deadline, run=run_id, host="a",
                             components=[{"name": "w", "program": waiter, "args": ["work"]}])
        client.notify("enter", phase="launch", step=0, published={}, components=[{"name": "w"}])
        await wait(lambda: any(type(e).__name__ == "Ack" and e.step == 0 for e in events))
        client.notify("enter", phase="work", step=1, published={},
                      components=[{"name": "w", "params": {"dir": str(work)}}])
        await wait(lambda: (work / "work.in").exists() or any(type(e).__name__ == "Ack" and e.step == 1
                                                              for e in events))
        partition = {"fault": "partition", "rule": {"peer": "b", "address": "10.250.77.2"}}
        for index, fault in enumerate([partition, {"fault": "pause", "component": "w"}]):
            await client.request("fault", deadline, index=index, at_ns=time.time_ns(), **fault)
        await wait(lambda: sum(type(e).__name__ == "FaultDone" for e in events) == 2)
        faults = [e for e in events if type(e).__name__ == "FaultDone"]
        serving.cancel()
        return [e.error for e in faults]

    first, port = start("first.log")
    try:
        errors = asyncio.run(drive(port))
    finally:
        os.kill(first.pid, signal.SIGKILL)
        first.wait(30)
    left = state()
    second, _ = start("second.log")
    after = state()
    second.terminate()
    second.wait(30)
    print(json.dumps({"fault_errors": errors, "left": left, "after": after,
                      "said": (work / "second.log").read_text()}))
    """)


def test_a_sigkilled_daemons_partition_and_paused_component_are_ended_by_the_next_daemon_and_said(
        veth_netns, tmp_path):
    run_id = session_run_id("left")
    veth_netns.run("ip", "link", "set", "lo", "up")  # the daemons listen on its loopback
    waiter = os.path.join(os.path.dirname(__file__), "..", "programs", "waiter.py")
    try:
        done = subprocess.run(["ip", "netns", "exec", veth_netns.name, sys.executable, "-c", KILLED_MID_PHASE,
                               str(tmp_path), run_id, os.path.abspath(waiter)],
                              capture_output=True, text=True, timeout=180)
    finally:  # what a failure left: the namespace goes with the fixture, a stopped process not
        kill_run_processes(run_id, [], signal.SIGKILL)
    assert done.returncode == 0, done.stderr + (tmp_path / "first.log").read_text()
    seen = json.loads(done.stdout)
    assert seen["fault_errors"] == ["", ""], seen
    table = names.table(run_id)
    # Left behind by the SIGKILL: the partition's table, and the paused component, stopped.
    assert table in seen["left"]["tables"], seen
    assert seen["left"]["statuses"] == ["stopped"], seen
    # Ended by the next daemon at its start, and said in its log.
    assert table not in seen["after"]["tables"] and seen["after"]["statuses"] == [], seen
    said = seen["said"]
    assert f"WARNING run {run_id} (host a): its netspecd (pid " in said, said
    assert "died without ending it: process " in said, said
    assert "(w), left stopped by a pause: resumed and ended" in said, said
    assert f"removed the run's nftables table {table}" in said, said
    note = leftovers.swept(tmp_path / "droot", run_id)
    assert note is not None and any(table in r for r in note.removed), note
    assert not list((tmp_path / "droot" / leftovers.RECORDS).glob("*.json")), "the record removed"


def test_a_record_whose_daemon_is_alive_is_left_alone(tmp_path):
    run_id = session_run_id("held")
    path = leftovers.hold(tmp_path, run_id, "a")  # this process holds it
    assert leftovers.sweep_dead(tmp_path, 1.0) == []
    assert path.exists()
    leftovers.release(path)
    assert not path.exists()


def test_a_record_that_is_not_one_is_said_and_removed_and_nothing_is_ended(tmp_path):
    records = tmp_path / leftovers.RECORDS
    records.mkdir()
    (records / "x.json").write_text('{"run": "../../etc", "host": "a", "pid": 1, "started": 0}')
    [said] = leftovers.sweep_dead(tmp_path, 1.0)
    assert said.startswith(f"{records / 'x.json'}: not a record of a run (run id '../../etc' is not a name")
    assert said.endswith(": removed, nothing of it ended")
    assert not (records / "x.json").exists()
