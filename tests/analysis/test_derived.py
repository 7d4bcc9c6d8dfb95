"""What comes out of a merged result set: Getstats statistics checked against scipy on fixed
data, the report, the CAMP-derived tables on counters with known rates, and the filter graph
with its errors."""

from __future__ import annotations

import csv
import io
import math

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from netspec.analysis.derive import Workload, camp_warnings, write_derived
from netspec.analysis.graph import GraphError, check_node, run_graph, user_filter
from netspec.analysis.metrics import Metric
from netspec.analysis.report import report_lines, write_csv
from netspec.analysis.resultset import open_tables
from netspec.analysis.stats import compare, outliers, summarize, trend
from netspec.analysis.timeline import merge_files
from netspec.analysis.usercode import absolute
from netspec.daemon.sampler import open_stream
from scipy import stats
from support import sample_a_process_that_exits

# Auto-pilot's figure 2 shows Ext2 Postmark elapsed times like these (seconds).
ELAPSED = np.array([38.2, 37.7, 40.4, 38.1, 39.0, 38.3, 37.9, 38.2, 39.1, 39.6])
SECOND = 1_000_000_000
T0 = 1_700_000_000 * SECOND


def test_summary_matches_scipy():
    s = summarize(ELAPSED)
    low, high = stats.t.interval(0.95, len(ELAPSED) - 1, ELAPSED.mean(), stats.sem(ELAPSED))
    assert (s.count, s.mean, s.median, s.min, s.max) == (10, pytest.approx(38.65), 38.25, 37.7, 40.4)
    assert (s.low, s.high) == (pytest.approx(low), pytest.approx(high))
    assert s.sdev_pct == pytest.approx(100 * ELAPSED.std(ddof=1) / ELAPSED.mean())
    assert s.hw_pct == pytest.approx(100 * (high - low) / 2 / ELAPSED.mean())
    one = summarize(np.array([5.0]))
    assert one.count == 1 and one.mean == 5 and math.isnan(one.low) and math.isnan(one.sdev_pct)


def test_comparison_is_welchs_test():
    other = ELAPSED * 1.05 + np.linspace(-0.3, 0.3, 10)
    c = compare(ELAPSED, other)
    welch = stats.ttest_ind(other, ELAPSED, equal_var=False)
    assert c.p_equal == pytest.approx(welch.pvalue) and c.differs
    assert c.overhead_pct == pytest.approx(100 * (other.mean() / ELAPSED.mean() - 1))
    assert c.diff_low < other.mean() - ELAPSED.mean() < c.diff_high
    assert c.p_less == pytest.approx(welch.pvalue / 2) and c.p_greater == pytest.approx(1 - welch.pvalue / 2)
    same = compare(ELAPSED, ELAPSED[::-1])
    assert not same.differs and same.diff_low < 0 < same.diff_high
    assert compare(ELAPSED, np.array([1.0])) is None


def test_outliers_and_trends_are_warned():
    values = np.r_[np.full(20, 10.0) + np.tile([0.1, -0.1], 10), 30.0]
    (index, value, z), = outliers(values)
    assert (index, value) == (20, 30.0) and z > 4
    assert not trend(np.tile([1.0, 2.0], 20)).warns
    leak = trend(np.linspace(100, 80, 50) + np.tile([0.5, -0.5], 25))
    assert leak.warns and leak.change_pct == pytest.approx(-20 / 90 * 100, rel=0.05)


def metric(name, values):
    return Metric(name, "us", np.asarray(values, dtype=float), T0 + SECOND * np.arange(len(values)))


def test_the_report_compares_later_runs_with_the_first_then_groups_its_warnings():
    runs = {"base": {"interval rtt": metric("interval rtt", ELAPSED)},
            "slower": {"interval rtt": metric("interval rtt", ELAPSED * 1.1)},
            "alike": {"interval rtt": metric("interval rtt", ELAPSED[::-1])}}
    lines = report_lines(runs)
    assert lines[0] == "base" and "O/H%" not in lines[1] and "O/H%" in lines[4]
    row = lines[5].split()
    assert row[:5] == ["interval", "rtt", "(us)", "10", "42.52"]
    assert float(row[-1]) == pytest.approx(10, abs=0.01)
    assert lines[8].split()[-1] == "~"  # no overhead where Welch's test sees none
    assert lines[9].startswith("slower against base: interval rtt: 95% CI of the difference (")
    assert lines[9].endswith("they differ") and lines[10].endswith("they are indistinguishable")
    assert lines[11] == "warnings: 3"
    assert "\n".join(lines[12:]) == "\n".join(
        f"  {run}:\n    interval rtt: 1 of 10 values beyond z 2: #{i} {v} (z +2.0)"
        for run, i, v in (("base", 2, 40.4), ("slower", 2, 44.44), ("alike", 7, 40.4)))
    out = io.StringIO()
    write_csv(runs, out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [r["run"] for r in rows] == ["base", "slower", "alike"] and rows[0]["overhead_pct"] == ""
    assert float(rows[1]["overhead_pct"]) == pytest.approx(10) and float(rows[1]["p_equal"]) < 0.05


def test_runs_with_nothing_to_warn_of_get_no_warnings_section_and_no_empty_heading():
    steady = np.tile([40.0, 41.0], 10)  # no outlier, no drift, no caveat
    runs = {"point a": {"interval rtt": metric("interval rtt", steady)},
            "point b": {"interval rtt": metric("interval rtt", steady + 1)}}
    lines = report_lines(runs)
    said = [line for line in lines if line.startswith("warnings") or line in ("  point a:", "  point b:")]
    assert said == [], lines


@pytest.fixture
def camp_set(tmp_path):
    """Host h: a CPU busy 25 % of the time, a component using 0.2 CPUs in user and 0.05 in
    the kernel, a NIC receiving 1 MB/s; samples every 100 ms for 10 s; phases 2-5 s and 5-9 s."""
    rows = []
    for k in range(101):
        t, secs = T0 + k * SECOND // 10, k / 10
        fields = {"cpu.user": 0.2 * secs * SECOND, "cpu.system": 0.05 * secs * SECOND,
                  "cpu.idle": 0.75 * secs * SECOND, "cpu.iowait": 0.0, "mem_free": 5e9,
                  "net.eth0.bytes_recv": 1e6 * secs, "proc.app.user_ns": 0.2 * secs * SECOND,
                  "proc.app.kernel_ns": 0.05 * secs * SECOND, "proc.app.pid": 42.0}
        rows += [{"ts": t, "bound_ns": 10, "host": "h", "entity": "CAMP/node", "field": f, "value": v,
                  "text": None} for f, v in fields.items()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "samples.parquet")
    phases = [{"step": 0, "phase": "warm", "host": "h", "component": "app", "status": "ok",
               "entered": T0 + 2 * SECOND, "acked": T0 + 5 * SECOND},
              {"step": 1, "phase": "work", "host": "h", "component": "app", "status": "ok",
               "entered": T0 + 5 * SECOND + SECOND // 20, "acked": T0 + 9 * SECOND},
              {"step": 2, "phase": "after", "host": "h", "component": "app", "status": "ok",
               "entered": T0 + 11 * SECOND, "acked": T0 + 12 * SECOND}]
    pq.write_table(pa.Table.from_pylist(phases), tmp_path / "phases.parquet")
    events = [{"ts": T0 + k, "host": "h", "component": "app", "entity": "A/done", "kind": "counter",
               "value": float(k), "data": None} for k in range(1, 4)]
    pq.write_table(pa.Table.from_pylist(events), tmp_path / "events.parquet")
    return tmp_path


def test_camp_counters_become_rates_phase_usage_and_a_workload(camp_set):
    (workload,) = write_derived(open_tables(camp_set), camp_set)
    db = open_tables(camp_set)
    rates = dict(db.execute("SELECT field, avg(rate) FROM rates WHERE host = 'h' GROUP BY field").fetchall())
    assert rates["cpu.busy_pct"] == pytest.approx(25) and rates["net.eth0.bytes_recv"] == pytest.approx(1e6)
    assert rates["proc.app.user_ns"] == pytest.approx(0.2) and "mem_free" not in rates
    usage = {(p, f): (d, r)
             for p, f, d, r in db.execute("SELECT phase, field, delta, per_s FROM usage").fetchall()}
    # 5.05 s falls between two samples: the counter is interpolated there.
    assert usage["work", "net.eth0.bytes_recv"] == (pytest.approx(3.95e6), pytest.approx(1e6))
    assert usage["warm", "proc.app.kernel_ns"][0] == pytest.approx(0.15 * SECOND)
    assert usage["after", "cpu.user"] == (None, None)  # outside the sampled window: not guessed
    assert workload == Workload("h", "app", 10 * SECOND, 2 * SECOND, SECOND // 2)
    assert workload.kind == "waiting"
    assert Workload("h", "x", SECOND, SECOND // 5, SECOND // 2).kind == "kernel-bound"
    assert Workload("h", "x", SECOND, SECOND * 9 // 10, 0).kind == "CPU-bound"
    assert db.execute("SELECT entity, updates, value FROM states").fetchall() == [("A/done", 3, 3.0)]


PHASES = ["launch", "run", "collect"]


@pytest.mark.parametrize(("spec", "key", "message"), [
    ({"filter": "selct", "input": "events"}, ("filter",), "unknown filter 'selct': built in are select"),
    ({"filter": "select", "input": "event"}, ("input",), "unknown input .event.: a merged table"),
    ({"filter": "trim", "input": "events", "warmpu": "2s"}, ("warmpu",), "trim takes warmup, first"),
    ({"filter": "select", "input": "events", "since": "rnu"}, ("since",), "neither a phase of the schedule"),
    ({"filter": "pair", "input": "events", "start": "A/a"}, ("filter",), "missing a required argument"),
    ({"filter": "nowhere:f", "input": "events"}, ("filter",), "cannot load filter module nowhere"),
    ({"filter": "select", "input": "events", "where": "(SELECT 1) > 0"}, ("where",),
     "subquery is not allowed"),
])
def test_a_bad_node_is_named_with_the_key_at_fault(tmp_path, spec, key, message):
    with pytest.raises(GraphError, match=message) as caught:
        check_node("n", spec, [], tmp_path, PHASES)
    assert caught.value.key == key


def test_the_graph_selects_trims_pairs_exports_and_runs_a_users_filter(tmp_path):
    events = [{"ts": T0 + k * SECOND // 100, "host": "a" if k % 2 == 0 else "b", "component": "c",
               "entity": "T/send" if k % 2 == 0 else "T/recv", "kind": "event", "tag": k // 2,
               "ts_local": T0 + k * SECOND // 100, "bound_ns": 5} for k in range(200)]
    pq.write_table(pa.Table.from_pylist(events), tmp_path / "events.parquet")
    (tmp_path / "mine.py").write_text(
        "def tenfold(rel, node, *, by=10):\n    return rel.select(f'duration_ns * {by} AS big')\n")
    graph = {"legs": {"filter": "pair", "input": "events", "start": "T/send", "end": "T/recv"},
             "late": {"filter": "select", "input": "legs", "since": "1s", "host": "b"},
             "calm": {"filter": "trim", "input": "late", "first": 10},
             "big": {"filter": f"{tmp_path / 'mine.py'}:tenfold", "input": "calm"},
             "out": {"filter": "export", "input": "big", "format": "csv"},
             "broken": {"filter": "select", "input": "legs", "where": "no_such_column > 1"},
             "after_broken": {"filter": "export", "input": "broken"}}
    db = open_tables(tmp_path)
    warnings = run_graph(db, graph, tmp_path, tmp_path, T0, {}, trusted={graph["big"]["filter"]})
    assert len(warnings) == 2 and "analysis node broken (select)" in warnings[0]
    assert "no_such_column" in warnings[0]
    assert warnings[1] == "analysis node after_broken: skipped, its input broken failed"
    assert db.execute("SELECT count(*), min(duration_ns), max(duration_ns) FROM legs").fetchone() == (
        100, SECOND // 100, SECOND // 100)
    assert db.execute("SELECT count(*) FROM late").fetchone() == (50,)
    big = (tmp_path / "out.csv").read_text().splitlines()
    assert big[0] == "big" and len(big) == 41 and set(big[1:]) == {str(SECOND // 10)}


def test_a_histogram_node_counts_and_draws(tmp_path):
    rows = [{"name": "x", "duration_ns": v, "end_ts": T0 + i}
            for i, v in enumerate([1, 2, 2, 3, 3, 3, 4, 4, 4, 4])]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "intervals.parquet")
    (tmp_path / "plots").mkdir()
    db = open_tables(tmp_path)
    assert run_graph(db, {"h": {"filter": "histogram", "input": "intervals", "bins": 4}}, tmp_path, tmp_path,
                     T0, {}, trusted=()) == []
    assert [c for (c,) in db.execute("SELECT count FROM h ORDER BY lo").fetchall()] == [1, 2, 3, 4]
    assert (tmp_path / "plots" / "h.png").read_bytes()[:4] == b"\x89PNG"
    assert duckdb.sql(f"SELECT 1 FROM '{tmp_path}/intervals.parquet' LIMIT 1").fetchall() == [(1,)]


def test_what_scipy_warns_of_is_said_in_the_report_and_never_leaks(recwarn):
    same = np.full(10, 5.0)
    runs = {"a": {"interval x": metric("interval x", same)},
            "b": {"interval x": metric("interval x", same + 1e-15 * np.arange(10))}}
    lines = report_lines(runs)
    assert not recwarn.list
    assert lines[-2:] == ["  b:", "    interval x: against the baseline, scipy: Precision loss occurred in "
                          "moment calculation due to catastrophic cancellation: its p-value is not to be "
                          "trusted"]


def test_what_camp_said_of_its_samples_is_among_the_merges_warnings_a_line_a_kind(tmp_path):
    streams = open_stream(tmp_path / "a", "r", "a")
    sampler, pid = sample_a_process_that_exits(streams, after=1)
    for _ in range(3):
        sampler.warn("skipped", "3 of 100 random instants had passed", skipped=3, slots=100)
    streams.stop()
    merge_files({"a": sorted((tmp_path / "a").glob("*.ds"))}, {}, tmp_path / "merged")
    assert camp_warnings(open_tables(tmp_path / "merged")) == [
        f"host a: CAMP: component load: process {pid} (python) has exited",
        "host a: CAMP: 3 of 100 random instants had passed (and 2 more like it)"]


def test_a_loop_busy_40_percent_of_the_time_is_waiting_not_io_bound():
    loop = Workload("h", "duty", 10 * SECOND, 4 * SECOND, 0)
    assert loop.kind == "waiting"
    assert loop.text() == ("h/duty: waiting (real 10.00 s, user 4.00 s, system 0.00 s: CPU 40 %; waiting "
                           "60 % of the time: on I/O, a timer or a peer, which CAMP does not tell)")


def test_a_loop_that_waited_on_a_run_queue_says_how_much_of_its_waiting_that_was():
    starved = Workload("h", "burner", 10 * SECOND, 2 * SECOND, 0, 7 * SECOND)
    assert starved.kind == "waiting"
    assert starved.text() == ("h/burner: waiting (real 10.00 s, user 2.00 s, system 0.00 s: CPU 20 %; "
                              "waiting 80 % of the time: 70 % on a run queue for a CPU, the rest on I/O, a "
                              "timer or a peer, which CAMP does not tell)")


def test_a_percentages_interval_from_two_values_stays_within_0_and_100_and_the_report_says_it_was_clamped():
    busy = Metric("cpu busy a", "%", np.array([2.0, 30.0]), np.arange(2))
    unclamped = summarize(busy.values)
    assert unclamped.low < 0 and unclamped.high > 100 and not unclamped.clamped  # Student's t, n = 2
    s = busy.summary()
    assert (s.low, s.high, s.clamped, s.mean) == (0.0, 100.0, True, 16.0)
    lines = report_lines({"r": {busy.name: busy}})
    assert lines[2].split()[7:9] == ["0", "100"]  # LOW and HIGH
    assert lines[-1] == ("    cpu busy a: its 95 % t interval runs past what it can be (0 to 100 %): LOW and "
                         "HIGH are clamped there (n = 2: more values narrow it)")
    cpus = Metric("cpu of x on a", "cpus", np.array([0.01, 0.5]), np.arange(2)).summary()
    assert cpus.low == 0.0 and cpus.high > 1 and cpus.clamped


def test_a_run_with_no_metric_and_a_metric_the_first_run_lacks_are_said_not_dropped():
    runs = {"r1": {"rtt": metric("rtt", [10.0, 11.0, 12.0])},
            "r2": {"rtt": metric("rtt", [10.0, 11.0, 12.0]), "new": metric("new", [1.0, 2.0])},
            "r3": {}}
    lines = report_lines(runs)
    assert lines[-2:] == ["r3: no metric to report (no interval, pair or CAMP counter in its result set)",
                          "r2: new is not in r1, the first run: not compared"]


def test_a_nodes_filter_of_the_users_own_is_read_one_way_a_built_in_one_is_none(tmp_path):
    # The loader, the plan's filter files, the merge's trusted filters and provenance all read it so.
    assert user_filter({"filter": "select"}) is None and user_filter({}) is None
    assert user_filter({"filter": "mine.filters:keep"}) == ("mine.filters", "keep")
    assert user_filter({"filter": "sub/mine.py:keep"}) == ("sub/mine.py", "keep")
    assert absolute("sub/mine.py:keep", tmp_path) == f"{tmp_path / 'sub' / 'mine.py'}:keep"
    assert absolute("mine.filters:keep", tmp_path) == "mine.filters:keep"


def test_a_received_graph_writes_under_its_result_set_only_and_runs_no_query(tmp_path):
    # A run's record is anyone's: its node names become file names, its where a condition.
    out = tmp_path / "run" / "merged"
    out.mkdir(parents=True)
    pq.write_table(pa.table({"ts": [T0, T0 + 1], "entity": ["A/x", "A/y"], "tag": [1, 2]}),
                   out / "events.parquet")
    (tmp_path / "secret").write_text("root:hash\n")
    graph = {"../../escape": {"filter": "export", "input": "events", "format": "csv"},
             "a/b": {"filter": "narrate", "input": "events"},
             "nl\n": {"filter": "export", "input": "events", "format": "json"},
             "peek": {"filter": "select", "input": "events",
                      "where": f"(SELECT count(*) FROM read_text('{tmp_path / 'secret'}')) > 0"},
             "kept": {"filter": "select", "input": "events", "where": "tag > 1"},
             "half": {"filter": "export"}}
    db = open_tables(out)
    warnings = run_graph(db, graph, out, tmp_path, T0, {}, trusted=())
    assert [w.split(":")[0] for w in warnings] == [
        "analysis node ../../escape (export)", "analysis node a/b (narrate)", "analysis node nl\n (export)",
        "analysis node peek (select)", "analysis node 'half'"]
    assert "'../../escape' is not a name netspec makes a path of" in warnings[0]
    assert "subquery is not allowed" in warnings[3]
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["events.parquet", "secret"]
    assert db.execute("SELECT tag FROM kept").fetchall() == [(2,)]


def test_a_durations_interval_never_runs_below_0_us_and_the_report_says_which_end_it_clamped():
    # A campaign point's three runs, one of them starved (a fixed 2 ms step took 1.7 s).
    step = Metric("interval WK/step", "us", np.array([2_010.0, 2_090.0, 1_700_000.0]), np.arange(3))
    assert summarize(step.values).low < 0  # Student's t, n = 3: below what a duration can be
    s = step.summary()
    assert (s.low, s.clamped) == (0.0, True) and s.high > s.max
    lines = report_lines({"w.fail=0": {step.name: step}})
    assert lines[2].split()[6:8] == ["0", f"{s.high:.4g}"]  # LOW and HIGH
    assert lines[-1] == ("    interval WK/step: its 95 % t interval runs past what it can be (at least 0 "
                         "us): LOW is clamped there (n = 3: more values narrow it)")
