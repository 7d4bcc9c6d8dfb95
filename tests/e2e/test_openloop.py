"""End to end: the bundled coordinated-omission experiment (experiments/openloop), shortened
to 2 s a phase. Against one server that stalls 200 ms every second, the open-loop phase's
p99 counts the stalls (>= 150 ms) while the closed-loop phase's, of the same client and
server, omits them: thousands of quick requests and one slow one a stall. The figures are
the run's own, as `ns_control report` prints them and as its operations table holds them."""

import re
import shutil

import duckdb
import pytest
from netspec import results
from netspec.analysis.phases import phase_figures
from netspec.analysis.resultset import open_tables
from support import REPO, ns_control

pytestmark = pytest.mark.e2e

STALL = REPO / "experiments" / "openloop" / "stall.yaml"
DURATION = "duration_s: 5"


def test_the_open_loop_p99_counts_the_servers_stalls_and_the_closed_loop_one_omits_them(tmp_path):
    text = STALL.read_text()
    assert DURATION in text
    (tmp_path / "stall.yaml").write_text(text.replace(DURATION, "duration_s: 2"))
    shutil.copy(STALL.parent / "stall.py", tmp_path / "stall.py")
    done = ns_control("run", "stall.yaml", cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    run = next((tmp_path / "runs" / "stall").iterdir())
    db = open_tables(run / "merged")
    figures = {f.phase: f for f in phase_figures(db)}
    (opened,), (closed,) = figures["open"].operations, figures["closed"].operations
    stalls = duckdb.sql(f"SELECT count(*) FROM '{run}/merged/intervals.parquet' WHERE name = 'LOAD/stall'"
                        ).fetchall()[0][0]
    assert stalls >= 3  # at least one in each 2 s phase
    # Open loop: 200/s whatever the server does; a stall's 40 requests wait up to 200 ms each.
    assert opened.count >= 380 and opened.ok == opened.count
    assert opened.ok_latency.p99_ns >= 150e6, opened
    # Closed loop: the same stalls, each seen by one request; the p99 is the loopback's.
    assert closed.count > 5 * opened.count and closed.ok == closed.count
    assert closed.ok_latency.max_ns >= 150e6
    assert closed.ok_latency.p99_ns < 50e6, closed
    slow = duckdb.sql(f"""SELECT count(*) FROM '{run}/merged/operations.parquet'
                          WHERE latency_ns > 100e6 AND intended_ts BETWEEN {figures['closed'].start_ns}
                          AND {figures['closed'].end_ns}""").fetchall()[0][0]
    assert 1 <= slow <= stalls
    # The merged log histogram says the same p99 within its 1 %.
    (hist,) = figures["open"].histograms
    assert hist.count == opened.ok
    got = hist.quantile(0.99)
    exact = db.execute(f"""SELECT quantile_disc(latency_ns, 0.99) FROM operations
                           WHERE intended_ts BETWEEN {figures['open'].start_ns}
                           AND {figures['open'].end_ns}""").fetchall()[0][0]
    assert abs(got.value - exact) <= got.relative_error * exact + 1
    with results.open_run(run).tables() as tables:  # the Python API's figures are the same
        assert tables.operations() == (*figures["open"].operations, *figures["closed"].operations)
        assert [h.count for h in tables.histograms()] == [opened.ok, closed.ok]
    report = ns_control("report", "latest", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    said = re.findall(r"LOAD/request on a/client: (\d+) operations.*\n\s+latency ok p50 \S+ \S+, "
                      r"p99 (\S+) (\w+)", report.stdout)
    assert [int(n) for n, _, _ in said] == [opened.count, closed.count], report.stdout
    (p99, unit), _ = [(float(v), u) for _, v, u in said]
    assert unit == "ms" and p99 >= 150, report.stdout
