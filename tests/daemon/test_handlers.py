"""The daemon's handlers through a real daemon: a connection acts on the run it set up
(or joined, with the run's token, to relay its steps), a tree is a tree, a host is shared
only when asked, and what crosses the wire is checked where it is read."""

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from daemonview import Session
from netspec.protocol import messages as m
from netspec.protocol.errors import RemoteError
from netspec.protocol.exits import run_processes
from support import session_run_id, wait_for

TOKEN = os.urandom(16)
SLEEPER = {"name": "sleeper", "argv": ["sleep", "300"], "start": "launch", "stop": "work"}


async def _launched(s: Session, run: str, host: str = "a") -> None:
    await s.request("setup", run=run, host=host, components=[SLEEPER], join_token=TOKEN)
    s.client.notify("enter", phase="launch", step=0, published={}, components=[{"name": "sleeper"}])
    assert (await s.event("ack", "sleeper"))["status"] == "ok"


def test_a_connection_cannot_join_the_run_it_set_up_and_its_hang_up_still_ends_the_run(daemon, key):
    run = session_run_id("r-self-join")

    async def scenario():
        async with Session(daemon.port, key) as s:
            await _launched(s, run)
            with pytest.raises(RemoteError, match=f"this connection holds run '{run}' already"):
                await s.request("join", run=run, host="a", token=TOKEN)
            assert run_processes(run)
    asyncio.run(scenario())
    wait_for(lambda: not run_processes(run), timeout=10, what="the hung-up connection's run to end")

    async def again():  # and its id is free again: a setup of it waits for the reset under way
        async with Session(daemon.port, key) as s, asyncio.timeout(10):
            return await s.request("setup", run=run, host="a", components=[])
    assert "root" in asyncio.run(again())


def test_a_run_set_up_again_the_moment_its_connection_hangs_up_is_its_own_again(daemon, key):
    """A controller that reconnects at once is not told that another controller holds its run."""
    run = session_run_id("r-reconnect")

    async def scenario():
        async with Session(daemon.port, key) as s:
            await _launched(s, run)
        async with Session(daemon.port, key) as s, asyncio.timeout(20):
            return await s.request("setup", run=run, host="a", components=[])
    for _ in range(3):
        assert "root" in asyncio.run(scenario())
    wait_for(lambda: not run_processes(run), timeout=10, what="the last run to end")


@pytest.mark.parametrize(("fields", "field"), [
    ({"streams": {"s": {"ring_chunks": "4"}}}, r"\$\.streams\[\.\.\.\]\.ring_chunks"),
    ({"streams": {"s": {"components": "one"}}}, r"\$\.streams\[\.\.\.\]\.components"),
    ({"streams": {"s": {"chunk_records": 0}}}, r"\$\.streams\[\.\.\.\]\.chunk_records"),
    ({"camp": {"interval_ms": 0.01}}, r"\$\.camp\.interval_ms"),
    ({"camp": {"interval_ms": float("nan")}}, r"\$\.camp\.interval_ms"),
    ({"camp": {"interfaces": 7}}, r"\$\.camp\.interfaces"),
])
def test_a_setup_whose_streams_or_camp_are_of_the_wrong_type_is_refused_naming_it_and_the_daemon_serves_on(
        daemon, key, fields, field):
    async def scenario():
        async with Session(daemon.port, key) as s:
            with pytest.raises(RemoteError, match=f"'setup' does not fit: .* `{field}`"):
                await s.request("setup", run=session_run_id("r-streams"), host="a", components=[], **fields)
            return await s.request("hello")
    assert asyncio.run(scenario())["pid"] == daemon.proc.pid


@pytest.mark.parametrize("timeout_s", [float("nan"), float("inf"), -1.0, 1e12, "5", True])
def test_a_request_timeout_that_is_no_number_of_seconds_is_refused_and_the_daemon_serves_on(
        daemon, key, timeout_s):
    async def scenario():
        async with Session(daemon.port, key) as s:
            with pytest.raises(RemoteError, match=r"'setup' does not fit: .* `\$\.timeout_s`"):
                async with asyncio.timeout(20):  # no deadline of the client's: it would set timeout_s
                    await s.client.request("setup", None, run=session_run_id("r-timeout"), host="a",
                                           components=[], timeout_s=timeout_s)
            return await s.request("hello")
    assert asyncio.run(scenario())["pid"] == daemon.proc.pid


def test_a_run_is_joined_only_with_its_token_and_its_host_and_a_joined_connection_only_relays(daemon, key):
    run = session_run_id("r-join")

    async def scenario():
        async with Session(daemon.port, key) as owner, Session(daemon.port, key) as other:
            await _launched(owner, run)
            with pytest.raises(RemoteError, match=r"'join' does not fit: .* required field `token`"):
                await other.request("join", run=run, host="a")
            with pytest.raises(RemoteError, match=f"run '{run}' is not joined without its join token"):
                await other.request("join", run=run, host="a", token=os.urandom(16))
            with pytest.raises(RemoteError, match=f"this daemon is host 'a' of run '{run}', not 'b'"):
                await other.request("join", run=run, host="b", token=TOKEN)
            await other.request("join", run=run, host="a", token=TOKEN)
            refused = {}
            for kind, fields in (("reset", {"clean": True}), ("end", {"component": "sleeper"}), ("files", {}),
                                 ("read", {"path": "/etc/hostname"}), ("shutdown", {}),
                                 ("tree", {"children": []}),
                                 ("clksync", {"role": "serve", "key": os.urandom(16)}),
                                 ("setup", {"run": "x", "components": []})):
                with pytest.raises(RemoteError) as caught:
                    await other.request(kind, **fields)
                refused[kind] = caught.value.error.message
            alive = run_processes(run)
            await owner.request("reset", clean=True)
            return refused, alive
    refused, alive = asyncio.run(scenario())
    assert len(alive) == 1  # none of it reached the run
    assert refused.pop("setup") == "this connection relays a run as a parent in its tree: it sets up none"
    for kind, message in refused.items():
        assert message.startswith(f"this connection relays run '{run}' as a parent in its tree: only the "
                                  "connection that set the run up may "), kind


@pytest.mark.parametrize(("child", "message"), [
    ("a", "host 'a' cannot be in its own child 'a''s subtree (a cycle in the tree)"),
    # The daemon itself under another name: it is not the host its parent expects.
    ("b", "host b refused to join the relay tree: this daemon is host 'a' of run '{run}', not 'b'"),
])
def test_a_tree_with_this_daemon_as_its_own_child_is_refused(daemon, key, child, message):
    run = session_run_id("r-cycle")

    async def scenario():
        async with Session(daemon.port, key) as s:
            await s.request("setup", run=run, host="a", components=[], join_token=TOKEN)
            with pytest.raises(RemoteError) as caught:
                await s.request("tree", children=[{"host": child, "address": ["127.0.0.1", daemon.port],
                                                   "hosts": [child]}])
            with pytest.raises(RemoteError, match=r"hosts \['c'\] are in the subtrees of two children"):
                await s.request("tree", children=[{"host": h, "address": ["127.0.0.1", daemon.port],
                                                   "hosts": [h, "c"]} for h in ("b", "d")])
            return caught.value.error.message, await s.request("hello")
    said, hello = asyncio.run(scenario())
    assert said == message.format(run=run) and hello["pid"] == daemon.proc.pid


def test_a_setup_beside_another_controllers_live_run_is_refused_naming_it_unless_shared(daemon, key):
    first, second = session_run_id("r-first"), session_run_id("r-second")

    async def scenario():
        async with Session(daemon.port, key) as one, Session(daemon.port, key) as two:
            await one.request("setup", run=first, host="a", components=[])
            with pytest.raises(RemoteError) as caught:
                await two.request("setup", run=second, host="a", components=[])
            shared = await two.request("setup", run=second, host="a", components=[], share=True)
            peer = "{}:{}".format(*one.client.channel.transport.get_extra_info("sockname")[:2])
            return caught.value.error.message, shared, peer
    refused, shared, peer = asyncio.run(scenario())
    assert refused == (f"this host is in use by run '{first}' (set up by the controller at {peer}); a run "
                       "shares a host only when asked to (ns_control run --share-hosts)")
    assert "root" in shared


def test_a_component_named_as_the_daemon_itself_is_refused_at_setup(daemon, key):
    async def scenario():
        async with Session(daemon.port, key) as s:
            with pytest.raises(RemoteError, match="a component may not be named 'netspecd': that is the "
                                                  "daemon's own name in node-wide steps"):
                await s.request("setup", run=session_run_id("r-named"), components=[
                    {"name": m.NODE, "argv": ["true"]}])
    asyncio.run(scenario())


@pytest.mark.parametrize("interval_ms", [1e300, float("nan"), float("inf"), -5, 0, True, "200"])
def test_a_probe_interval_out_of_bounds_is_refused_where_the_daemon_reads_it(daemon, key, interval_ms):
    async def scenario():
        async with Session(daemon.port, key) as s:
            await s.request("setup", run=session_run_id("r-interval"), host="a", components=[])
            with pytest.raises(RemoteError, match=r"'clksync' does not fit: Expected .* `\$\.interval_ms`"):
                await s.request("clksync", role="probe", peer="ref", address="127.0.0.1", port=9,
                                key=os.urandom(16), interval_ms=interval_ms)
            return await s.request("hello")
    assert asyncio.run(scenario())["pid"] == daemon.proc.pid


@contextlib.contextmanager
def another_daemon(tmp_path: Path) -> Iterator[subprocess.Popen]:
    """A second real netspecd with the same key, for a tree's child; its port in `.port`."""
    proc = subprocess.Popen([sys.executable, "-m", "netspec.daemon.main", "--listen", "127.0.0.1:0",
                             "--announce", "--root", str(tmp_path / "child-root")], stdout=subprocess.PIPE,
                            text=True)
    try:
        proc.port = json.loads(proc.stdout.readline())["port"]
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _joined_at(child: subprocess.Popen) -> int:
    """How many connections the child daemon holds, beside its own controller's one."""
    return len([c for c in psutil.Process(child.pid).net_connections("tcp")
                if c.status == psutil.CONN_ESTABLISHED]) - 1


def test_two_trees_asked_at_once_connect_one_set_of_children_and_the_run_closes_it(daemon, key, tmp_path):
    run = session_run_id("r-two-trees")

    async def scenario(child):
        async with Session(daemon.port, key) as parent, Session(child.port, key) as own:
            await own.request("setup", run=run, host="b", components=[], join_token=TOKEN)
            await parent.request("setup", run=run, host="a", components=[], join_token=TOKEN)
            tree = [{"host": "b", "address": ["127.0.0.1", child.port], "hosts": ["b"]}]
            answers = await asyncio.gather(*(parent.request("tree", children=tree) for _ in range(2)),
                                           return_exceptions=True)
            joined = _joined_at(child)
            await parent.client.close()  # the parent's run ends, and its relay's links with it
            wait_for(lambda: _joined_at(child) == 0, timeout=10, what="the relay's link to close")
            return answers, joined
    with another_daemon(tmp_path) as child:
        answers, joined = asyncio.run(scenario(child))
    assert [a["children"] for a in answers if isinstance(a, dict)] == [1]
    assert [str(a) for a in answers if isinstance(a, Exception)] == [
        "host t: NetspecError: host a is connected to its children in the tree already"]
    assert joined == 1  # one link: none left open without an owner


def test_a_tree_whose_child_could_not_be_joined_may_be_asked_again(daemon, key, tmp_path):
    run = session_run_id("r-tree-again")

    async def scenario(child):
        async with Session(daemon.port, key) as parent, Session(child.port, key) as own:
            await own.request("setup", run=run, host="b", components=[], join_token=TOKEN)
            await parent.request("setup", run=run, host="a", components=[], join_token=TOKEN)
            wrong = [{"host": "c", "address": ["127.0.0.1", child.port], "hosts": ["c"]}]  # b is there
            with pytest.raises(RemoteError, match="this daemon is host 'b'"):
                await parent.request("tree", children=wrong)
            right = [{"host": "b", "address": ["127.0.0.1", child.port], "hosts": ["b"]}]
            return await parent.request("tree", children=right)
    with another_daemon(tmp_path) as child:
        assert asyncio.run(scenario(child))["children"] == 1
