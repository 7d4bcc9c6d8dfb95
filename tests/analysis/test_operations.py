"""Operations over real streams merged: two clients' operations written through nodelib's
entity (its clock given, so the times are the test's), in a steady step and a partition
step; operations.parquet holds every one with its outcome, cause and lag, and the per-phase
figures count failures by cause, keep the latency of successes and of failures apart, and
find the longest time without a success. Log histograms of both clients merge exactly."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
from netspec.analysis.histograms import merged_histograms
from netspec.analysis.operations import COLUMNS
from netspec.analysis.phases import SPANS_SQL, phase_figures, run_phase_lines
from netspec.analysis.points import point_metrics
from netspec.analysis.resultset import merge_run, open_tables
from netspec.datastream.loghist import LogScale, SpecsDiffer, merge, quantile
from netspec.protocol.campaignrecord import CampaignRun, Point
from operations_run import MS, PARTITION, partitioned_run


def test_every_operation_is_a_row_with_its_outcome_cause_and_lag_on_the_global_timeline(tmp_path):
    run = partitioned_run(tmp_path)
    result = merge_run(run)
    assert result.operations == 400
    assert tuple(pq.read_schema(run / "merged" / "operations.parquet").names) == COLUMNS
    rows = duckdb.sql(f"""SELECT host, outcome, cause, count(*), min(latency_ns), max(latency_ns),
                                 max(lag_ns), min(service_ns), bool_and(start_ts = intended_ts + lag_ns)
                          FROM '{run}/merged/operations.parquet' GROUP BY ALL ORDER BY ALL""").fetchall()
    assert rows == [("c1", "ok", None, 170, MS, MS, 0, MS, True),
                    ("c1", "timeout", "no reply in 1 s", 30, 1000 * MS, 1000 * MS, 0, 1000 * MS, True),
                    ("c2", "failed", "refused", 10, MS, MS, 0, MS, True),
                    ("c2", "ok", None, 190, MS, 3 * MS, 2 * MS, MS, True)]


def test_each_phase_counts_failures_by_cause_and_keeps_their_latency_apart_from_the_successes(tmp_path):
    run = partitioned_run(tmp_path)
    merge_run(run)
    db = open_tables(run / "merged")
    steady, partition = phase_figures(db)
    c1, c2 = partition.operations
    assert (c1.component, c1.count, c1.ok, c1.failures) == ("c1/client", 100, 70,
                                                            (("timeout", "no reply in 1 s", 30),))
    assert c1.ok_latency.max_ns == MS and c1.failed_latency.p50_ns == 1000 * MS
    assert c1.failed_in_a_row == 30
    # The first success comes at the 31st operation's end (300 ms + 1 ms after the first instant).
    assert c1.no_success_ns == 301 * MS and c1.no_success_from_ns == PARTITION[0]
    assert c1.rate_per_s == pytest.approx(100 / ((1000 * MS - 1) / 1e9))
    assert (c2.ok, c2.failures, c2.failed_in_a_row) == (90, (("failed", "refused", 10),), 1)
    steady_c2 = steady.operations[1]
    assert steady_c2.failed_latency is None
    assert steady_c2.ok_latency.p50_ns == 3 * MS  # from the intended instant
    assert (steady_c2.lag_max_ns, steady_c2.late) == (2 * MS, 100)
    lines = run_phase_lines(run / "merged", "r")
    said = ("      KV/put on c1/client: 100 operations, 100.0/s, 70 ok, 30 failed "
            "(timeout: no reply in 1 s x30)")
    assert said in lines, lines
    assert any("longest without a success 301 ms, 30 failed in a row" in line for line in lines), lines


def test_log_histograms_of_many_hosts_merge_exactly_and_their_percentiles_are_the_whole_ones(tmp_path):
    run = partitioned_run(tmp_path)
    merge_run(run)
    db = open_tables(run / "merged")
    (merged,) = merged_histograms(db, SPANS_SQL)
    assert (merged.name, merged.sources, merged.count) == ("KV/put_ns", 2, 200)
    values = np.array([1_500] * 90 + [150_000_000] * 10 + [2_500] * 100)
    for q in (0.5, 0.9, 0.99):
        got = merged.quantile(q)
        true = np.sort(values)[int(np.ceil(q * len(values))) - 1]
        assert abs(got.value - true) <= got.relative_error * true, (q, got, true)
    assert merged.scale.relative_error <= 0.01
    line = phase_figures(db)[0].histograms[0].line()
    assert line.startswith("KV/put_ns: log histogram, 2 record(s) of 2 source(s) merged, 200 values, p50 2")


def test_histograms_of_other_bins_are_refused_naming_both_and_a_percentile_out_of_range_is_said():
    scale = LogScale(1_000, 1e10, 100)
    with pytest.raises(SpecsDiffer, match="buckets"):
        merge([({"lo": 1_000, "hi": 1e10, "buckets": 100}, [0] * 102),
               ({"lo": 1_000, "hi": 1e10, "buckets": 101}, [0] * 103)])
    counts = [0] * 102
    counts[-1] = 5  # every value at or above hi
    assert quantile(scale, counts, 0.5).above and quantile(scale, counts, 0.5).value is None
    assert quantile(scale, [0] * 102, 0.5) is None


def test_a_campaign_points_runs_merge_their_histograms_exactly_and_say_the_error_bound(tmp_path):
    paths = [partitioned_run(tmp_path / name) for name in ("one", "two")]
    for run in paths:
        merge_run(run)
    runs = [CampaignRun(id=f"r{i}", path=str(run), status="ok", counted=True) for i, run in enumerate(paths)]
    point = Point(params={}, label="p", runs=runs)
    (metrics,) = point_metrics([point], "p99").values()
    hist = metrics["histogram KV/put_ns"]
    # Each run's p99 of its 200 values (10 of them 150 ms), from the bins within 1 %.
    assert hist.values == pytest.approx([150e6] * 2, rel=0.01)
    assert hist.caveat.startswith("2 run(s) merged exactly: 400 values, p50 2"), hist.caveat
    assert "(each within 1 %)" in hist.caveat
    assert metrics["operation KV/put failed"].values == pytest.approx([10.0, 10.0])  # 40 of 400 a run
    assert metrics["operation KV/put ok latency"].unit == "us"
