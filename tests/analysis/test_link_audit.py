"""The link audit's arithmetic (analysis/links.py) against known answers: the Wilson
interval, and the verdict of a link and step from its figures."""

from __future__ import annotations

import duckdb
import msgspec
import pytest
from netspec.analysis.links import (
    Audit,
    Condition,
    audit,
    configured_links,
    configured_words,
    counters,
    increase,
    verdict,
    wilson,
)
from netspec.datastream.schema import ProbeRecord, SentRecord
from netspec.protocol.links import Backends, LinkCondition, LinkOffer, LinkStats, PeerStats
from netspec.protocol.runplan import PlanRecord, PlanStep
from netspec.protocol.runrecord import FaultRecord, HostLinks, HostRecord, RunRecord
from netspec.protocol.runstep import LinkChange, Step


def test_the_wilson_interval_matches_its_known_values() -> None:
    lo, hi = wilson(5, 100)
    assert lo == pytest.approx(0.02154, abs=1e-4) and hi == pytest.approx(0.11175, abs=1e-4)
    lo, hi = wilson(0, 50)
    assert lo == 0.0 and hi == pytest.approx(0.07135, abs=1e-4)
    assert wilson(0, 0) == (0.0, 1.0)


def _row(**figures: object) -> dict:
    row = {"probes_sent": 100, "probes_received": 95, "delay_p50_ms": 10.1, "delay_bound_ms": 0.05,
           "loss_pct": 5.0, "loss_low_pct": 2.15, "loss_high_pct": 11.18, "rate_mbit": None,
           "bottleneck": None}
    return {**row, **figures}


def test_a_link_within_its_tolerances_is_said_so() -> None:
    assert verdict(_row(), Condition(delay_ms=10.0, loss_pct=5.0)) == (True, "within tolerance")
    within, said = verdict(_row(), Condition(delay_ms=10.0, loss_pct=5.0), realtime_refused=True)
    assert within and said.startswith("within tolerance; its user-space path ran without real-time priority")


def test_a_link_off_says_by_how_much_in_each_way() -> None:
    within, words = verdict(_row(delay_p50_ms=12.0, loss_pct=20.0, loss_low_pct=13.3, loss_high_pct=28.9),
                            Condition(delay_ms=10.0, loss_pct=5.0, backend="user"))
    assert within is False
    assert "delay p50 12.000 ms, +2.000 ms off 10 ms (tolerance 0.550 ms)" in words
    assert "loss 20.0 % [13.3, 28.9] against 5 %" in words


def test_a_partition_that_let_probes_through_is_off() -> None:
    assert verdict(_row(probes_received=3), Condition(partition=True)) == (
        False, "partition leaked 3 of 100 probes")
    assert verdict(_row(probes_received=0), Condition(partition=True))[0] is True


def test_a_counter_that_went_down_was_reset_and_counts_from_zero_after() -> None:
    assert increase([5, 9, 2, 6]) == 4 + 2 + 4
    assert increase([3]) == 0 and increase([]) == 0


def _events(rows: list[tuple[int, str, str, object]]) -> duckdb.DuckDBPyConnection:
    db = duckdb.connect()
    db.execute("CREATE TABLE events (ts BIGINT, bound_ns BIGINT, host VARCHAR, entity VARCHAR, kind VARCHAR, "
               "data VARCHAR, value DOUBLE)")
    for ts, host, entity, data in rows:
        db.execute("INSERT INTO events VALUES (?, 0, ?, ?, 'event', ?, NULL)",
                   [ts, host, entity, msgspec.json.encode(data).decode()])
    return db


def test_a_link_whose_counters_were_reset_in_a_step_reads_no_negative_rate_or_lateness() -> None:
    def read(ts: int, sent: int, queued: int, late: int) -> tuple[int, str, str, object]:
        stats = LinkStats(read_ns=ts, peers={"b": PeerStats(rate_bytes=sent * 1000, rate_packets=sent,
                                                            queued=queued, late_over_1ms=late)})
        return (ts, "a", "LINKS/stats", stats)
    # the table made anew (counters reset) between the second and the third read
    db = _events([read(0, 100, 100, 10), read(10**9, 200, 200, 20), read(2 * 10**9, 50, 40, 2)])
    got = counters(db, [(0, "run", 0, 3 * 10**9)], Audit())[("a", "b", 0)]
    assert got.rate_mbit == pytest.approx(150 * 1000 * 8 / 2 / 1e6)
    assert got.user_late_pct == pytest.approx(100 * 12 / 140)


def test_a_scheduled_partition_is_audited_as_the_fault_and_the_rest_of_its_step_as_the_link() -> None:
    ms = 1_000_000
    plan = PlanRecord(schedule=[PlanStep("run", link_state={"a->b": LinkCondition(delay_ms=1.0)})])
    offer = LinkOffer()
    record = RunRecord(
        format=1, id="r", experiment="e", status="ok", plan=plan,
        hosts={"a": HostRecord(links=HostLinks(offer, {"b": Backends(parts={"delay": "htb"})}))},
        steps=[Step("run", "ok",
                    links={"a": LinkChange(placements={"b": Backends(parts={"delay": "user"})})})],
        faults=[FaultRecord(index=0, kind="partition", target="b", host="a", done_ns=400 * ms,
                            ended_ns=700 * ms)])
    configured = configured_links(record)
    assert configured.conditions[("a", "b", 0)].backend == "user"  # the step's own placement, not launch's
    assert configured.conditions[("a", "b", 0)].faults == ((0, 400 * ms, 700 * ms),)
    # a probe every 10 ms in 0..1 s: each crosses in 1 ms but in the fault's window
    rows: list[tuple[int, str, str, object]] = []
    for seq, sent in enumerate(range(30 * ms, 1000 * ms, 10 * ms)):
        rows.append((sent, "a", "LINKS/sent", SentRecord("b", seq, sent, 40)))
        if not 400 * ms <= sent < 700 * ms:
            rows.append((sent + ms, "b", "LINKS/probe", ProbeRecord("a", "b", seq, sent, sent + ms, 40)))
    db = _events(rows)
    db.execute("CREATE TABLE phases AS SELECT 0 AS step, 'run' AS phase, 0::BIGINT AS entered, "
               "1000000000::BIGINT AS acked")
    found = {row["fault"]: row for row in audit(db, configured, {}).rows}
    assert set(found) == {None, 0}
    link, fault = found[None], found[0]
    assert (link["loss_pct"], link["within"], link["backend"]) == (0.0, True, "user")
    # the probes sent within 20 ms and their 1 ms flight before its start or end, or 20 ms
    # after, are left out: in flight as it changed
    assert (fault["partition"], fault["probes_received"], fault["probes_sent"], fault["within"]) == \
        (True, 0, 26, True)
    assert (fault["start"], fault["end"]) == (400 * ms, 700 * ms)


def test_the_probes_in_flight_as_the_run_ends_and_its_conditions_go_are_left_out() -> None:
    # The last step's probes across a 300 ms link: those sent in its last 20 ms and 300 ms
    # were still held when the run's end removed the conditions, and came through at once
    # (or not at all): neither a delay below the link's nor a loss of its own.
    ms = 1_000_000
    plan = PlanRecord(schedule=[PlanStep("collect", link_state={"a->b": LinkCondition(delay_ms=300.0)})])
    placed = HostLinks(LinkOffer(), {"b": Backends(parts={"delay": "user"})})
    record = RunRecord(format=1, id="r", experiment="e", status="ok", plan=plan,
                       hosts={"a": HostRecord(links=placed)}, steps=[Step("collect", "ok")])
    rows: list[tuple[int, str, str, object]] = []
    for seq, sent in enumerate(range(30 * ms, 1000 * ms, 10 * ms)):
        rows.append((sent, "a", "LINKS/sent", SentRecord("b", seq, sent, 40)))
        arrived = sent + 300 * ms if sent + 300 * ms < 1000 * ms else (1000 * ms if seq % 3 else None)
        if arrived is not None:
            rows.append((arrived, "b", "LINKS/probe", ProbeRecord("a", "b", seq, sent, arrived, 40)))
    db = _events(rows)
    db.execute("CREATE TABLE phases AS SELECT 0 AS step, 'collect' AS phase, 0::BIGINT AS entered, "
               "1000000000::BIGINT AS acked")
    [row] = audit(db, configured_links(record), {}).rows
    assert (row["probes_sent"], row["probes_received"], row["loss_pct"]) == (65, 65, 0.0), row
    assert row["delay_p50_ms"] == pytest.approx(300.0) and row["within"], row


@pytest.mark.parametrize("following", [{"a->b": LinkCondition(partition=True)}, {}],
                         ids=["partitioned", "cleared"])
def test_a_partition_on_the_next_step_counts_none_of_its_drops_against_the_step_before(
        following: dict[str, LinkCondition]) -> None:
    # The next step's links: take effect at its release, before its first entry: a probe the
    # partition drops in between was sent in the step before, and is not that step's loss. So
    # for a change that clears the link (no condition in that step: its queue dropped as the
    # condition went).
    ms = 1_000_000
    plan = PlanRecord(schedule=[PlanStep("run", link_state={"a->b": LinkCondition(delay_ms=1.0)}),
                                PlanStep("cut", link_state=following)])
    record = RunRecord(
        format=1, id="r", experiment="e", status="ok", plan=plan,
        hosts={"a": HostRecord(links=HostLinks(LinkOffer(), {"b": Backends(parts={"delay": "user"})}))},
        steps=[Step("run", "ok"),
               Step("cut", "ok", links={"a": LinkChange(pairs=["a->b"], at_ns=950 * ms, bound_ns=ms)})])
    rows: list[tuple[int, str, str, object]] = []
    for seq, sent in enumerate(range(30 * ms, 1000 * ms, 10 * ms)):  # cut from 949 ms, 'cut' entered at 1 s
        rows.append((sent, "a", "LINKS/sent", SentRecord("b", seq, sent, 40)))
        if sent < 949 * ms:
            rows.append((sent + ms, "b", "LINKS/probe", ProbeRecord("a", "b", seq, sent, sent + ms, 40)))
    db = _events(rows)
    db.execute("CREATE TABLE phases AS SELECT * FROM (VALUES (0, 'run', 0::BIGINT, 900000000::BIGINT), "
               "(1, 'cut', 1000000000::BIGINT, 1100000000::BIGINT)) t(step, phase, entered, acked)")
    found = audit(db, configured_links(record), {})
    run = next(row for row in found.rows if row["phase"] == "run")
    assert (run["loss_pct"], run["within"]) == (0.0, True), run
    # those sent within 20 ms of the change (and its bound) are left out, and counted
    assert (run["probes_sent"], found.outside) == (90, 7), (run, found.outside)


def test_the_user_space_paths_lateness_is_a_share_of_the_copies_it_sent_never_past_all() -> None:
    # A step that sent the packets the step before had held (a 300 ms delay): fewer queued in
    # it than sent, every one of them late. Of those queued that read 140 %.
    def read(ts: int, queued: int, released: int, late: int) -> tuple[int, str, str, object]:
        stats = LinkStats(read_ns=ts, peers={"b": PeerStats(queued=queued, released=released,
                                                            late_over_1ms=late)})
        return (ts, "a", "LINKS/stats", stats)
    db = _events([read(0, 100, 60, 0), read(10**9, 150, 130, 70)])
    got = counters(db, [(0, "run", 0, 2 * 10**9)], Audit())[("a", "b", 0)]
    assert got.user_late_pct == pytest.approx(100.0)


@pytest.mark.parametrize(("overruns", "bottleneck"), [(0, False), (3, True)])
def test_the_paths_drops_for_a_links_loss_are_no_bottleneck_its_own_overruns_are(
        overruns: int, bottleneck: bool) -> None:
    # A 5 % loss on the user-space path: its drops are the link's loss, as configured; the
    # packets its host's path lost unable to keep up (queue_overruns) are the bottleneck.
    ms = 1_000_000
    plan = PlanRecord(schedule=[PlanStep("run", link_state={"a->b": LinkCondition(loss_pct=5.0)}),
                                PlanStep("collect", link_state={"a->b": LinkCondition(loss_pct=5.0)})])
    placed = HostLinks(LinkOffer(), {"b": Backends(parts={"loss": "user"})})
    record = RunRecord(format=1, id="r", experiment="e", status="ok", plan=plan,
                       hosts={"a": HostRecord(links=placed)},
                       steps=[Step("run", "ok"), Step("collect", "ok")])
    rows: list[tuple[int, str, str, object]] = []
    for seq, sent in enumerate(range(30 * ms, 1000 * ms, 10 * ms)):
        rows.append((sent, "a", "LINKS/sent", SentRecord("b", seq, sent, 40)))
        if seq % 20:
            rows.append((sent + ms, "b", "LINKS/probe", ProbeRecord("a", "b", seq, sent, sent + ms, 40)))
    for i, ts in enumerate((0, 500 * ms, 990 * ms)):
        stats = LinkStats(read_ns=ts, queue_overruns=overruns * i // 2,
                          peers={"b": PeerStats(queued=1000 * i, released=950 * i, dropped_user=50 * i)})
        rows.append((ts, "a", "LINKS/stats", stats))
    db = _events(rows)
    db.execute("CREATE TABLE phases AS SELECT * FROM (VALUES (0, 'run', 0::BIGINT, 900000000::BIGINT), "
               "(1, 'collect', 1000000000::BIGINT, 1100000000::BIGINT)) AS t(step, phase, entered, acked)")
    row = next(r for r in audit(db, configured_links(record)).rows if r["phase"] == "run")
    assert (row["user_drops"], row["user_overruns"], row["bottleneck"]) == (100, overruns, bottleneck), row
    assert ("was the bottleneck" in row["verdict"]) is bottleneck, row["verdict"]


def test_a_delay_given_as_zero_is_audited_as_a_delay_of_zero_not_as_none() -> None:
    plan = PlanRecord(schedule=[PlanStep("run", link_state={"a->b": LinkCondition(path=True)})])
    record = RunRecord(format=1, id="r", experiment="e", status="ok", plan=plan, steps=[Step("run", "ok")])
    assert configured_links(record).conditions[("a", "b", 0)].delay_ms == 0.0
    assert configured_words(0.0, None, None, None) == "0 ms"
    assert configured_words(None, None, None, None) == "none"


def test_a_link_a_burst_filled_for_a_moment_is_not_a_full_one_whose_rate_fell_short() -> None:
    # Five reads half a second apart of a 10 Mbit/s class: a burst (the TCP probes' 64 KB)
    # held packets back in one interval; a link kept full in each.
    def reads(overlimits: list[int]) -> duckdb.DuckDBPyConnection:
        return _events([(i * 500_000_000, "a", "LINKS/stats", LinkStats(read_ns=i * 500_000_000, peers={
            "b": PeerStats(rate_bytes=10_000 * i, rate_packets=10 * i, rate_overlimits=o)}))
            for i, o in enumerate(overlimits)])
    window = [(0, "run", 0, 3 * 10**9)]
    assert counters(reads([0, 0, 45, 45, 45]), window, Audit())[("a", "b", 0)].saturated is False
    assert counters(reads([0, 900, 1800, 2700, 3600]), window, Audit())[("a", "b", 0)].saturated is True
