"""End to end: the bundled fail-over experiment on the session's namespaced hosts, its
partition done by each host's firewall and its replica killed, the fail-over on the merged
timeline after the faults that caused it."""

import duckdb
import pytest
from netspec.protocol.runrecord import read_run
from support import REPO, ns_control

pytestmark = pytest.mark.e2e

FAILOVER = REPO / "experiments" / "failover" / "failover.yaml"


def test_the_failover_experiment_fails_over_after_its_partition_and_back_after_its_kill(ssh_env, tmp_path):
    done = ns_control("run", str(FAILOVER), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    run = tmp_path / "runs" / "latest"
    record = read_run(run)
    assert record.status == "ok"  # the killed replica is the schedule's, not a failure
    assert record.components["b/backup"].scheduled
    partitions = [f for f in record.faults if f.kind == "partition"]
    assert sorted((f.host, f.target) for f in partitions) == [("a", "b"), ("a", "c"), ("b", "a"), ("c", "a")]
    for fault in record.faults:
        assert not fault.error and fault.done_ns is not None, fault
    # The rules' own counters saw the partition drop the primary's heartbeats and the
    # client's requests: each a first drop after the partition was in effect.
    dropped = {(f.host, f.target): f for f in partitions if f.effect_ns is not None}
    assert {("a", "b"), ("c", "a")} <= set(dropped), partitions
    for fault in dropped.values():
        assert fault.done_ns <= fault.effect_ns and fault.ended_ns >= fault.done_ns + 800_000_000
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
    # After the partition each direction had its links: delay back: the link audit's probes
    # crossed it at 1 ms once more (and were lost meanwhile, in the run's phase).
    links = run / "merged" / "links.parquet"
    audit = duckdb.sql(f"SELECT src, dst, phase, delay_p50_ms, loss_pct FROM '{links}' "
                       "WHERE phase IN ('run', 'collect')").fetchall()
    after = {(src, dst): p50 for src, dst, phase, p50, _ in audit if phase == "collect" and p50 is not None}
    assert {("a", "b"), ("b", "a")} <= set(after) and all(p50 >= 1.0 for p50 in after.values()), audit
    assert next(loss for src, dst, phase, _, loss in audit if (src, dst, phase) == ("c", "a", "run")) > 0
