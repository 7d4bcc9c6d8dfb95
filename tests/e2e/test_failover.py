"""End to end: the bundled fail-over experiment on the session's namespaced hosts, its
partition done by each host's firewall and its replica killed, the fail-over on the merged
timeline after the faults that caused it. Its primary and backup stay partitioned into a step
of the test's own that changes their link's delay: the partition holds through the change, and
its heal leaves the step's delay in effect."""

import shutil

import duckdb
import pytest
from netspec.protocol.runrecord import read_run
from support import REPO, ns_control

pytestmark = pytest.mark.e2e

FAILOVER = REPO / "experiments" / "failover" / "failover.yaml"
RUN_STEP = "  - {phase: run, components: [client], deadline: 30s}\n"
AB_PARTITION = "  - {partition: [a, b], at: {phase: run, after: 500ms}, for: 800ms}\n"
CLIENT = "  client: {host: c, program: failover.py, args: [--role, client], params: {duration_s: 2.3}}\n"


def _crossing(tmp_path):
    """The bundled experiment, with a and b's partition held to run+3.1 s, into a step `hold`
    (1.5 s, after the client's 2.3 s run) whose links: change a<->b's delay to 3 ms."""
    text = FAILOVER.read_text()
    assert RUN_STEP in text and AB_PARTITION in text and CLIENT in text
    text = text.replace(AB_PARTITION, AB_PARTITION.replace("800ms", "2600ms"))
    text = text.replace(CLIENT, CLIENT + '  hold: {host: c, command: [sleep, "1.5"], start: hold}\n')
    text = text.replace(RUN_STEP, RUN_STEP + "  - {phase: hold, components: [hold], "
                                             "links: [{between: [a, b], delay: 3ms}]}\n")
    path = tmp_path / "failover.yaml"
    path.write_text(text)
    shutil.copy(FAILOVER.parent / "failover.py", tmp_path / "failover.py")
    return path


def test_the_failover_experiment_fails_over_after_its_partition_and_back_after_its_kill(ssh_env, tmp_path):
    done = ns_control("run", str(_crossing(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    run = tmp_path / "runs" / "latest"
    record = read_run(run)
    assert record.status == "ok"  # the killed replica is the schedule's, not a failure
    assert record.components["b/backup"].scheduled
    # two entries, a and b, a and c: two faults, each done per direction (its parts)
    partitions = [p for f in record.faults if f.kind == "partition" for p in f.parts]
    assert sorted((p.host, p.peer) for p in partitions) == [("a", "b"), ("a", "c"), ("b", "a"), ("c", "a")]
    for fault in record.faults:
        assert not fault.error and fault.done_ns is not None, fault
    # Each partition was asked of its host at launch with links:' conditions (a host that
    # could not would have failed the launch naming it), its placement recorded.
    for fault in partitions:
        assert record.hosts[fault.host].links.placements[fault.peer].parts["partition"] == "nftables"
    # The rules' own counters saw the partition drop the primary's heartbeats and the
    # client's requests: each a first drop after the partition was in effect.
    dropped = {(p.host, p.peer): p for p in partitions if p.effect_ns is not None}
    assert {("a", "b"), ("c", "a")} <= set(dropped), partitions
    for fault in dropped.values():
        assert fault.done_ns <= fault.effect_ns and fault.ended_ns >= fault.done_ns + 800_000_000
    # a and b's partition crossed hold's change of their link
    hold = next(step for step in record.steps if step.phase == "hold")
    ab = [p for p in partitions if {p.host, p.peer} == {"a", "b"}]
    assert all(f.ended_ns > hold.links[f.host].at_ns for f in ab), (ab, hold.links)
    events = duckdb.sql(f"SELECT ts, host, entity, tag FROM '{run / 'merged' / 'events.parquet'}' "
                        "WHERE entity IN ('FO/takeover', 'FO/failover') ORDER BY ts").fetchall()
    takeover = [ts for ts, host, entity, _ in events if entity == "FO/takeover"]
    failovers = [ts for ts, host, entity, _ in events if entity == "FO/failover"]
    isolated = min(f.done_ns for f in partitions)
    killed = next(f for f in record.faults if f.kind == "kill")
    # The backup took over and the client failed over after the partition, before its end;
    # the client failed back after the kill.
    assert len(takeover) == 1 and isolated < takeover[0] < isolated + 800_000_000, (events, isolated)
    assert len(failovers) == 2, events
    assert isolated < failovers[0] < isolated + 800_000_000
    assert killed.done_ns < failovers[1] < killed.done_ns + 700_000_000
    assert "fail-over(s)" in done.stdout and f"fault {killed.index} kill backup" in done.stdout
    # The audit: each partition's window is its fault's, every probe sent in it lost (in hold
    # too: the step's change did not lift it), the rest of the step the link's (the fault's
    # loss not blamed on it); after the heal a<->b had hold's 3 ms, not the run's 1 ms put back.
    links = run / "merged" / "links.parquet"
    audit = duckdb.sql(f"SELECT src, dst, phase, fault, delay_p50_ms, loss_pct, probes_sent, "
                       f"probes_received, within FROM '{links}' "
                       "WHERE phase IN ('run', 'hold', 'collect')").fetchall()
    faulted = {(src, dst, phase): (sent, got, within)
               for src, dst, phase, fault, _, _, sent, got, within in audit if fault is not None}
    crossed = {("a", "b", "run"), ("c", "a", "run"), ("a", "b", "hold"), ("b", "a", "hold")}
    assert crossed <= set(faulted), audit
    assert all(got == 0 for _, got, _ in faulted.values()), faulted  # none crossed a partition
    assert all(faulted[key][0] > 0 and faulted[key][2] for key in crossed), faulted
    own = {(src, dst, phase): loss for src, dst, phase, fault, _, loss, *_ in audit if fault is None}
    assert own[("c", "a", "run")] < 20, audit
    after: dict[tuple[str, str], list[float]] = {}
    for src, dst, phase, fault, p50, *_ in audit:
        if phase in ("hold", "collect") and fault is None and p50 is not None:
            after.setdefault((src, dst), []).append(p50)
    assert after.get(("a", "b")) and after.get(("b", "a")), audit
    assert all(p50 >= 3.0 for pair in (("a", "b"), ("b", "a")) for p50 in after[pair]), audit
    assert all(1.0 <= p50 < 3.0 for p50 in after.get(("a", "c"), [])), audit
