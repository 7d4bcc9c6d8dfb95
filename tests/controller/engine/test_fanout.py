"""`fan_out: N`: steps reach the hosts through a tree of relaying daemons, and every host's
acks still reach run.json, exact."""

import asyncio
import os
import signal

import msgspec
import pytest
from netspec.controller.engine import release
from netspec.controller.engine.clocks import stretched
from netspec.controller.engine.fanout import FanOut, Tree
from netspec.controller.experiment.load import load
from netspec.controller.hosts.fleet import DaemonClient, Lost
from netspec.protocol import ackjournal, acksummary
from netspec.protocol import messages as m
from netspec.protocol.acksummary import AckSummary
from netspec.protocol.errors import ConfigError, ProtocolError, RemoteError
from netspec.protocol.events import FROM_DAEMON
from netspec.protocol.exits import run_processes
from netspec.protocol.kinds import Ack
from netspec.protocol.reading import Refused
from netspec.protocol.runrecord import ClockSync, Release, Step
from netspec.protocol.wire import packed
from support import latest_record, ns_control, on_the_wire, session_run_id, start_run


def _hosts(n: int) -> tuple[str, ...]:
    return tuple(f"h{i}" for i in range(n))


def test_the_tree_puts_each_host_below_one_first_level_host_with_at_most_width_children():
    tree = Tree(2, _hosts(7))
    assert tree.first == ("h0", "h1")
    assert tree.children("h0") == ("h2", "h3") and tree.children("h2") == ("h6",)
    assert tree.subtree("h0") == ["h0", "h2", "h3", "h6"] and tree.subtree("h1") == ["h1", "h4", "h5"]
    assert tree.depth() == 3
    for n, width in [(1, 2), (100, 8), (1000, 16), (1000, 32), (333, 3)]:
        tree = Tree(width, _hosts(n))
        top = tree.top()
        assert sorted(top) == sorted(tree.hosts)  # each host exactly once
        assert all(len(tree.children(h)) <= width for h in tree.hosts)
        longest = max(len(path_to(tree, h)) for h in tree.hosts)
        assert longest == tree.depth(), (n, width)
    # The clock reference answers every host's probes: it relays no one's steps.
    for n, width in [(7, 2), (1000, 16), (2, 2)]:
        tree = Tree.over(width, _hosts(n), "h0")
        assert tree.children("h0") == () and sorted(tree.hosts) == sorted(_hosts(n))


def path_to(tree: Tree, host: str) -> list[str]:
    """The hosts an enter passes through to reach `host`, the first-level one first."""
    parent = {c: h for h in tree.hosts for c in tree.children(h)}
    path = [host]
    while path[-1] in parent:
        path.append(parent[path[-1]])
    return path[::-1]


def _read(message):
    """A daemon's message as the controller reads it off the wire (protocol/kinds.py)."""
    return FROM_DAEMON(packed(message))


def _ack(**fields):
    return msgspec.convert({"t": m.ACK, "step": 0, "status": m.ACK_OK, "entered": 10, "acked": 25, **fields},
                           Ack)


def test_a_batch_of_acks_naming_a_host_outside_the_senders_subtree_is_refused():
    fan_out = FanOut({}, Tree(2, _hosts(7)))
    fan_out.owed[(0, "h0")] = 3  # as send() counts them: h0's subtree is h0, h2, h3, h6
    mine = {"t": m.ACK, "host": "h6", "step": 0, "component": "c", "status": m.ACK_OK, "entered": 1,
            "acked": 2}
    acks, summary = fan_out.batch("h0", _read({"t": m.ACKS, "step": 0, "acks": [mine]}))
    assert [(h, on_the_wire(a)) for h, a in acks] == [("h6", mine)] and summary is None
    with pytest.raises(ProtocolError, match=r"host h0: acks of hosts \['h4'\] outside its subtree"):
        fan_out.batch("h0", _read({"t": m.ACKS, "step": 0, "acks": [mine, {**mine, "host": "h4"}]}))
    with pytest.raises(ProtocolError, match="the run has no fan-out tree"):
        FanOut({}, None).batch("h0", _read({"t": m.ACKS, "step": 0, "acks": [mine]}))


def test_a_summary_is_checked_for_its_hosts_and_its_count_before_it_is_counted():
    fan_out = FanOut({}, Tree(2, _hosts(7)))
    fan_out.owed[(0, "h0")] = 2
    summary = AckSummary()
    summary.add_host("h6", [_ack(component="c", entry_clock=[3, 2])])
    wire = on_the_wire(summary.wire())
    assert wire["slowest"] == [[15, "h6"]] and wire["first"] == wire["last"] == [7, "h6/c"]
    _, got = fan_out.batch("h0", _read({"t": m.ACKS, "step": 0, "acks": [], "summary": wire}))
    assert on_the_wire(got) == wire
    assert list(ackjournal.entries(wire["records"])) == [
        ("h6", "c", {"status": "ok", "message": "", "entered_ns": 10, "acked_ns": 25, "start_ns": 7,
                     "start_bound_ns": 2})]
    stranger = {**wire, "slowest": [[15, "h4"]]}
    with pytest.raises(ProtocolError, match=r"host h0: a summary naming hosts \['h4'\] outside its subtree"):
        fan_out.batch("h0", _read({"t": m.ACKS, "step": 0, "acks": [], "summary": stranger}))
    # A summary that does not fit is refused where it is read, naming the field.
    for malformed, field in (({**wire, "acks": -1}, "`$.summary.acks`"), ({**wire, "records": "x"},
                             "`$.summary.records`"), ({**wire, "first": None}, "its starts have no ends"),
                             ([1], "`$.summary`"), ({**wire, "zlib": 1}, "`$.summary.zlib`")):
        refused = _read({"t": m.ACKS, "step": 0, "acks": [], "summary": malformed})
        assert type(refused) is Refused and field in refused.problem
        assert refused.problem.startswith("event 'acks' does not fit: ")
    # A first-level host deflates its records where they are many: the controller takes
    # them so, a relay takes none from below.
    assert not summary.wire(compress=True).zlib  # one host's: deflating costs more than it saves
    many = AckSummary()
    for _ in range(100):
        many.add_host("h6", [_ack(component="c")])
    deflated = many.wire(compress=True)
    assert deflated.zlib is True and len(deflated.records) < len(many.wire().records) / 5
    assert acksummary.problem(deflated, {"h6"}.__contains__, compressed=True) is None
    assert acksummary.problem(deflated, {"h6"}.__contains__) == "a summary with compressed records from below"
    assert list(ackjournal.entries(deflated.records, compressed=True)) == list(ackjournal.entries(
        many.wire().records))
    # One more ack than h0's subtree owes for the step: a relay that counts twice is caught.
    with pytest.raises(ProtocolError, match="1 more acks than step 0 asked of its subtree"):
        fan_out.batch("h0", _read({"t": m.ACKS, "step": 0, "acks": [], "summary": {**wire, "acks": 2}}))
    # Once all are in, the step keeps no entry, and one more is still refused.
    fan_out.batch("h0", _read({"t": m.ACKS, "step": 0, "acks": [], "summary": wire}))
    assert fan_out.owed == {}
    with pytest.raises(ProtocolError, match="1 more acks than step 0"):
        fan_out.batch("h0", _read({"t": m.ACKS, "step": 0, "acks": [], "summary": wire}))


def test_a_summary_carries_the_programs_starts_beside_the_daemons_and_is_checked_for_them():
    def ack(component, entered, started, offset):
        return _ack(component=component, entered=entered, acked=started + 9, started=started,
                    entry_clock=[offset, 2])
    child = AckSummary()
    child.add_host("h6", [ack("c", 100, 400, 10)])
    mine = AckSummary()
    mine.add_host("h2", [ack("d", 95, 150, -5)])
    mine.merge(_read({"t": m.ACKS, "step": 0, "acks": [], "summary": on_the_wire(child.wire())}).summary)
    summary = mine.wire()
    wire = on_the_wire(summary)
    # The daemons began at 90 and 100 on the global timeline; the programs at 390 and 155.
    assert (wire["starts"], wire["first"], wire["last"], wire["low"], wire["high"]) == (
        2, [90, "h6/c"], [100, "h2/d"], 88, 102)
    assert wire["programs"] == [2, [155, "h2/d"], [390, "h6/c"], 153, 392]
    folded = AckSummary()
    folded.merge(summary, keep_records=False)
    said = msgspec.to_builtins(release.skew(Step("work", "ok", release=Release(mode="at")), folded))
    assert said["skew_ns"] == 10 and said["program"] == {"starts": 2, "skew_ns": 235, "first": "h2/d",
                                                         "last": "h6/c", "at_most_ns": 239}
    subtree = {"h2", "h6"}.__contains__
    assert acksummary.problem(summary, subtree) is None
    stranger = msgspec.structs.replace(summary, programs=(2, (155, "h4/d"), (390, "h6/c"), 153, 392))
    assert acksummary.problem(stranger, subtree) == "a summary naming hosts ['h4'] outside its subtree"
    for malformed in ([2, None, None, 1, 2], [-1, None, None, None, None], "x", [1, 2]):
        refused = _read({"t": m.ACKS, "step": 0, "acks": [], "summary": {**wire, "programs": malformed}})
        assert type(refused) is Refused and "programs" in refused.problem


def test_an_ssh_host_in_a_fan_out_tree_is_an_error_naming_its_line(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("experiment: x\nfan_out: 4\nhosts:\n  a: {}\n  b: {ssh: user@example}\n"
                    "components:\n  c: {host: a, command: [true]}\nschedule: [launch]\n")
    with pytest.raises(ConfigError, match=r"exp.yaml:5: hosts.b.ssh: a host reached over SSH cannot be "
                                          r"in a fan-out tree \(fan_out: at line 2\)"):
        load(path)


SEVEN = """\
experiment: tree
fan_out: 2
hosts: {h0: {}, h1: {}, h2: {}, h3: {}, h4: {}, h5: {}, h6: {}}
components:
COMPONENTS
schedule:
  - launch
  - sync_clocks
  - {phase: work, release: at}
  - rest
  - collect
"""


def test_a_run_through_a_tree_records_every_hosts_acks_and_a_deep_hosts_failure(experiment, tmp_path):
    lines = [f'  c{i}: {{host: h{i}, program: ACTOR, args: ["launch,work,rest,collect"]'
             + (", params: {fail_in: rest}" if i == 0 else "") + "}" for i in range(7)]
    path = experiment(SEVEN.replace("COMPONENTS", "\n".join(lines)))
    done = ns_control("run", "--no-merge", str(path), "--runs", str(tmp_path / "runs"), cwd=tmp_path)
    assert done.returncode == 1
    # h0, the clock reference, is put last in the tree, a leaf (it relays no one's steps):
    # h1 -> h3 -> h0. Its error ack, two relays below the controller, is named all the same.
    assert "phase 'rest' failed on h0" in done.stderr and "c0 fails in rest as asked" in done.stderr
    assert "steps go through a fan-out tree: 7 hosts, 2 children at most, 3 levels" in done.stdout
    record = latest_record(tmp_path / "runs")
    assert record["fan_out"] == {"width": 2, "depth": 3, "relays": 3, "first": ["h1", "h2"]}
    steps = {s["phase"]: s for s in record["steps"]}
    for phase in ("launch", "sync_clocks", "work"):
        assert steps[phase]["status"] == "ok"
        assert sorted(steps[phase]["hosts"]) == [f"h{i}" for i in range(7)]
        for host, entry in steps[phase]["hosts"].items():
            for info in entry["components"].values():
                assert info["outcome"] == "ok", (phase, host)
                assert entry["sent_ns"] <= info["entered_ns"] <= info["acked_ns"] <= info["received_ns"]
    # Released at an instant through the tree: every start is placed on the global timeline.
    assert steps["work"]["release"]["starts"] == 7 and not steps["work"]["release"]["unplaced"]
    rest = steps["rest"]
    assert rest["status"] == "failed"
    assert rest["hosts"]["h0"]["components"]["c0"]["outcome"] == "error"
    assert record["status"] == "failed"
    # The run still gathered every host's streams and outputs.
    assert all(record["hosts"][f"h{i}"].get("streams") for i in range(7))


def test_a_daemon_refuses_to_relay_to_hosts_outside_its_subtree_and_acks_its_own_in_a_batch(daemon, key):
    run_id = session_run_id("r-relay")

    async def scenario():
        events = []

        def on_event(host, event):
            if not isinstance(event, Lost):
                events.append(on_the_wire(event))  # as the map it was on the wire
        client = await DaemonClient.connect("a", ("127.0.0.1", daemon.port), key, on_event)
        serving = asyncio.create_task(client.serve())
        deadline = asyncio.get_running_loop().time() + 10
        try:
            await client.request(m.SETUP, deadline, run=run_id, host="a", components=[])
            node = [{"name": m.NODE}]
            client.notify(m.ENTER, phase="rest", step=0, hosts={"a": 0, "zz": 1}, lists=[node, []],
                          published={})
            client.notify(m.ENTER, phase="rest", step=1, hosts={"a": 0}, lists=[node], published={})
            with pytest.raises(RemoteError, match="no run 'nope' is set up"):
                await client.request(m.JOIN, deadline, run="nope", host="a", token=os.urandom(16))
            async with asyncio.timeout_at(deadline):
                while not any(e["t"] == m.ACKS for e in events):
                    await asyncio.sleep(0.01)
                client.notify(m.ENTER, phase="rest", step=2, hosts={"a": 0}, lists=[node], published={},
                              summarize=True)
                while sum(e["t"] == m.ACKS for e in events) < 2:
                    await asyncio.sleep(0.01)
        finally:
            await client.close()
            await serving
        return events
    events = asyncio.run(scenario())
    errors = [e["error"]["message"] for e in events if e["t"] == m.ERROR]
    assert errors == ["hosts ['zz'] are not in the subtree of host a"]
    batch, summarized = [e for e in events if e["t"] == m.ACKS]
    assert batch["step"] == 1 and [(a["host"], a["component"], a["status"]) for a in batch["acks"]] == [
        ("a", m.NODE, m.ACK_OK)]
    # Asked for a summary, it folds its own plain ack: counted, its record in bytes (too few
    # to deflate, though this host is the tree's first level).
    summary = summarized["summary"]
    assert summarized["step"] == 2 and summarized["acks"] == [] and summary["zlib"] is False  # one record
    assert (summary["acks"], summary["hosts"]) == (1, 1)
    [(host, component, entry)] = ackjournal.entries(summary["records"])
    assert (host, component, entry["status"]) == ("a", m.NODE, m.ACK_OK) and summary["slowest"][0][1] == "a"


def test_a_relay_killed_mid_step_fails_the_run_and_every_hosts_files_are_still_gathered(experiment, tmp_path):
    # h1 relays to h3 and h4 (and h3 to h0, the clock reference, put last in the tree); it dies
    # while every host waits in 'work' for h0's component.
    lines = [f'  c{i}: {{host: h{i}, program: ACTOR, args: ["launch,work,rest,collect"]'
             + (", params: {hang_in: work}" if i == 0 else "") + "}" for i in range(7)]
    path = experiment(SEVEN.replace("COMPONENTS", "\n".join(lines)).replace(
        "  - {phase: work, release: at}\n", "  - {phase: work, deadline: 5m}\n"))

    def waiting_for_h0(record: dict) -> bool:
        # The step is summarized: its record has the hosts that acked, from the ack journal.
        steps = record.get("steps") or []
        return bool(steps) and steps[-1]["phase"] == "work" and sorted(steps[-1]["hosts"]) == [
            f"h{i}" for i in range(1, 7)]
    proc, record = start_run(path, tmp_path, waiting_for_h0, "every host but h0 to ack 'work'")
    os.kill(record["hosts"]["h1"]["daemon_pid"], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=90)
    assert proc.returncode == 1
    assert "phase 'work', host h1: connection lost" in stderr
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "failed"
    # h1's children lost their relay, not their controller: their files came the direct way,
    # and h1's own were salvaged from its disk.
    assert record["hosts"]["h1"]["salvaged"]["via"] == "the local filesystem"
    assert "[salvaged host h1: " in stdout
    for host in ("h3", "h4"):
        assert record["hosts"][host].get("streams"), host
        assert (tmp_path / "runs" / "latest" / "hosts" / host / f"c{host[1:]}" / "exit.json").exists()
    assert not run_processes(record["id"])


def test_the_clock_service_a_run_records_is_the_typed_record_the_user_is_told_of():
    clocks = ClockSync(reference="h0", probers=59, asked_interval_ms=200.0, interval_ms=295.0,
                       reference_budget_per_s=800.0)
    assert stretched(clocks) == ("clksync: 59 hosts probe the reference every 295 ms, not 200 ms, so that "
                                 "it answers at most 800 exchanges/s")
