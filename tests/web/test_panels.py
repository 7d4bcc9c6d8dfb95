"""The run page's panels over small result sets made in DuckDB, each holding what the case
needs: hosts that share a machine, container hosts, missing tables, long tails."""

from __future__ import annotations

import duckdb
import pytest
from netspec.protocol.hostfacts import HostFacts
from netspec.web import distributions, eventtable, panels

MS = 1_000_000
BOOT = "3b1c6f4e-boot"


def result_set(usage=(), events=(), intervals=()) -> duckdb.DuckDBPyConnection:
    """A connection with the views a merged run's tables make (analysis.resultset.open_tables):
    one step `work` from 0 to 1 s with a participant per host of `usage`, and the rows given."""
    db = duckdb.connect()
    hosts = sorted({h for h, _, _ in usage}) or ["a"]
    db.execute("CREATE TABLE p (step INT, phase VARCHAR, host VARCHAR, component VARCHAR, status VARCHAR, "
               "entered BIGINT, acked BIGINT)")
    db.executemany("INSERT INTO p VALUES (3, 'work', ?, 'x', 'ok', 0, 1000000000)", [[h] for h in hosts])
    db.execute("CREATE VIEW phases AS SELECT * FROM p")
    if usage:
        # A counter's delta over the step (0 to 1 s) is its rate's.
        db.execute("CREATE TABLE u (step INT, phase VARCHAR, host VARCHAR, field VARCHAR, per_s DOUBLE, "
                   "delta DOUBLE, start_ts BIGINT, end_ts BIGINT)")
        db.executemany("INSERT INTO u VALUES (3, 'work', ?, ?, ?, ?, 0, 1000000000)",
                       [[*row, row[2]] for row in usage])
        db.execute("CREATE VIEW usage AS SELECT * FROM u")
    if events:
        db.execute("CREATE TABLE e (ts BIGINT, host VARCHAR, entity VARCHAR, data VARCHAR, kind VARCHAR, "
                   "component VARCHAR)")
        db.executemany("INSERT INTO e VALUES (?, ?, ?, ?, 'event', 'x')", list(events))
        db.execute("CREATE VIEW events AS SELECT * FROM e")
    if intervals:
        db.execute("CREATE TABLE i (name VARCHAR, start_host VARCHAR, duration_ns DOUBLE, end_ts BIGINT, "
                   "source VARCHAR, tag BIGINT)")
        db.executemany("INSERT INTO i VALUES (?, ?, ?, 500000000, 'interval', 0)", list(intervals))
        db.execute("CREATE VIEW intervals AS SELECT * FROM i")
    return db


def local(n: int, cpus: int = 2) -> dict[str, HostFacts]:
    """The facts of `n` local hosts: daemons of one machine, one kernel, one address."""
    return {f"h{i}": HostFacts(boot_id=BOOT, address="127.0.0.1", cpu_count=cpus) for i in range(n)}


def test_a_machine_local_hosts_share_is_counted_once_in_the_network_of_each_phase():
    # 300 local hosts each read the same machine's ~650 kB/s (the 194 MB/s, summed)
    usage = [(f"h{i}", field, 325e3) for i in range(300)
             for field in ("net.lo.bytes_sent", "net.lo.bytes_recv")]
    shown = panels.phases(result_set(usage), local(300))
    assert [r["net"] for r in shown["rows"]] == ["650 kB/s"], shown["rows"]
    assert any("share one network namespace" in n and "counts it once" in n for n in shown["notes"]), shown


def test_hosts_at_addresses_of_their_own_each_count_their_own_network():
    facts = {h: HostFacts(boot_id=BOOT, address=f"10.0.0.{i}", cpu_count=2) for i, h in enumerate(("a", "b"))}
    usage = [("a", "net.eth0.bytes_sent", 1e6), ("b", "net.eth0.bytes_sent", 3e6)]
    assert [r["net"] for r in panels.phases(result_set(usage), facts)["rows"]] == ["4 MB/s"]


def test_a_cpu_figure_of_each_phase_is_at_most_its_hosts_cpus_and_said_so():
    usage = [("h0", "cpu.user", 2.92e9), ("h1", "cpu.user", 1.0e9)]
    shown = panels.phases(result_set(usage), local(2))
    assert shown["rows"][0]["cpu"] == "1.50 / 2.00 (h0)", shown["rows"]
    assert any("1 CPU figure(s) measured above their host's CPUs" in n for n in shown["notes"]), shown


@pytest.mark.parametrize("panel", ["phases", "resources"])
def test_container_hosts_whose_cgroup_camp_read_are_not_said_to_see_the_machines_cpu(panel):
    facts = {h: HostFacts(boot_id=BOOT, address=f"172.18.0.{i + 2}", cpu_count=2)
             for i, h in enumerate(("a", "b", "c"))}
    cgroup = [(0, h, "CAMP/warning", '{"kind": "cgroup", "message": "read its cgroup"}') for h in facts]
    db = result_set([(h, "cpu.user", 0.5e9) for h in facts], events=cgroup)
    notes = (panels.phases(db, facts)["notes"] if panel == "phases"
             else panels.resources(db, 0, {}, facts)["caveats"])
    assert not [n for n in notes if "of the machine they share" in n], notes
    assert any("container whose cgroup CAMP read" in n and "its container's own" in n for n in notes), notes


def test_a_histograms_end_bars_say_the_tail_they_hold_and_the_true_max():
    # STIM/rtt: most near 1 ms, a tail to 8.828 ms past p99.9 (the axis ended near 3.5 ms)
    values = [1e6 + 1e3 * (i % 500) for i in range(5000)] + [3.5e6, 8.828e6]
    (d,) = distributions.distributions(result_set(intervals=[("STIM/rtt", "a", v) for v in values]))
    assert d["max_text"] == "8.83 ms" and d["min_text"] == "1 ms", d
    said = [a["text"] for a in d["histogram"]["layout"]["annotations"]]
    assert any("last bar: also 2 of 5002 above p99.9, to the max 8.83 ms" in t for t in said), said
    assert "above p99.9, to the max 8.83 ms" in d["tail"]
    top = d["histogram"]["data"][0]["x"][-1]
    assert top < 8.828, top  # the axis ends short of the max: the words are what say it


def test_a_histogram_without_values_past_its_range_says_no_tail():
    (d,) = distributions.distributions(result_set(intervals=[("x", "a", 1e6)] * 10))
    assert d["tail"] == "" and len(d["histogram"]["layout"]["annotations"]) == 2


@pytest.mark.parametrize("panel, table", [("distributions", "intervals"), ("events", "events"),
                                          ("phases", "phases"), ("clocks", "clock")])
def test_a_table_missing_from_the_result_set_is_named_with_the_fetch_that_writes_it(panel, table):
    db = duckdb.connect()  # a result set every table of which is gone
    shown = {"distributions": lambda: distributions.distributions(db),
             "events": lambda: eventtable.events(db, 0),
             "phases": lambda: panels.phases(db, {}), "clocks": lambda: panels.clocks(db, 0)}[panel]()
    assert f"{table}.parquet is missing from this run's result set" in shown["missing"], shown
    assert "ns_control fetch RUN" in shown["missing"]


def test_an_intervals_value_is_shown_as_its_duration_and_an_events_as_logged():
    db = duckdb.connect()
    db.execute("""CREATE VIEW events AS SELECT * FROM (VALUES
        (10, 5, 'a', 'w', 'wk', 'WK/unit', 'interval', 3, 5065934.0::DOUBLE, NULL),
        (20, 5, 'a', 'w', 'wk', 'WK/count', 'event', 4, 17.0::DOUBLE, NULL))
        t(ts, bound_ns, host, component, stream, entity, kind, tag, value, data)""")
    rows = eventtable.events(db, 0)["rows"]
    assert [r["value_text"] for r in rows] == ["5.07 ms", "17"], rows


def test_each_hosts_worst_clock_bound_is_in_the_unit_that_suits_it():
    db = duckdb.connect()
    db.execute("""CREATE VIEW clock AS SELECT * FROM (VALUES
        ('a', 'a', 0, 0, 0, 0, 0, 0, 590, 'kernel'), ('b', 'a', 0, 0, 0, 0, 0, 0, 590, 'kernel'),
        ('c', 'a', 0, 0, 0, 0, 0, 0, 88700, 'kernel')) t(host, reference, segment, ts_local, ts, offset_ns,
        lo_ns, hi_ns, bound_ns, source)""")
    assert [r["worst_bound"] for r in panels.clocks(db, 0)["rows"]] == ["590 ns", "590 ns", "88.7 us"]


def test_plot_titles_sit_left_of_the_toolbar_and_p50_p99_labels_part():
    usage = [(h, "cpu.user", 0.5e9) for h in ("a", "b")]
    (heat, *_) = panels.resources(result_set(usage), 0, {}, local(2))["heatmaps"]
    assert heat["layout"]["title"]["xanchor"] == "left" and heat["layout"]["title"]["x"] == 0
    (d,) = distributions.distributions(result_set(intervals=[("x", "a", 1e6 + i) for i in range(100)]))
    p50, p99 = d["ecdf"]["layout"]["annotations"]
    assert (p50["text"], p50["xanchor"], p99["text"], p99["xanchor"]) == ("p50", "right", "p99", "left")


def test_the_timelines_event_ticks_say_an_intervals_duration_and_an_untagged_events_name():
    db = duckdb.connect()
    db.execute("""CREATE VIEW events AS SELECT * FROM (VALUES
        (10, 'a', 'w', 'wk', 'WK/unit', 'interval', 3, 5065934.0::DOUBLE, NULL),
        (20, 'a', 'w', 'wk', 'WK/ready', 'event', NULL, NULL, NULL))
        t(ts, host, component, stream, entity, kind, tag, value, data)""")
    ticks = panels.timeline_events(db, 0, {("a", "w"): "a/w"})
    assert ticks["hovertext"] == ["a/w WK/unit tag 3 5.07 ms", "a/w WK/ready"], ticks
