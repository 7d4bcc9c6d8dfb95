"""The browser's operations panel over a real merged run (tests/operations_run.py): a trace
per outcome, so failures stand apart from successes, each step's rows with their failures by
cause, and a figure past its points drawn fairly, with what it left out said."""

from __future__ import annotations

from netspec.analysis.phases import phase_operations
from netspec.analysis.resultset import merge_run, open_tables
from netspec.web import operations as panel
from operations_run import T0, partitioned_run


def test_the_panel_draws_each_outcome_apart_and_lists_every_steps_failures_by_cause(tmp_path):
    run = partitioned_run(tmp_path)
    merge_run(run)
    db = open_tables(run / "merged")
    data = panel.operations(db, T0, phase_operations(db))
    traces = {t["name"]: t for t in data["figure"]["data"]}
    assert sorted(traces) == ["failed (10)", "ok (360)", "timeout (30)"]
    assert len(traces["timeout (30)"]["x"]) == 30 and data["sampled"] == ""
    assert set(traces["timeout (30)"]["hovertext"]) == {"KV/put c1/client: no reply in 1 s"}
    assert "hovertext" not in traces["ok (360)"]  # its table row names it
    rows = [(r["phase"], r["component"], r["causes"]) for r in data["rows"]]
    assert rows == [("steady", "c1/client", "-"), ("steady", "c2/client", "-"),
                    ("partition", "c1/client", "timeout: no reply in 1 s x30"),
                    ("partition", "c2/client", "failed: refused x10")]
    assert data["rows"][2]["no_success"] == "301 ms (30 failed in a row)"


def test_past_its_points_the_figure_draws_every_step_and_outcome_its_share_and_says_so(tmp_path, monkeypatch):
    run = partitioned_run(tmp_path)
    merge_run(run)
    db = open_tables(run / "merged")
    # Groups (step, outcome) of 200, 160, 30 and 10: a share of 23 each keeps to 80.
    monkeypatch.setattr(panel, "POINTS", 80)
    data = panel.operations(db, T0, phase_operations(db))
    drawn = {t["name"]: len(t["x"]) for t in data["figure"]["data"]}
    assert drawn == {"ok (360)": 200 // 9 + 160 // 7, "timeout (30)": 15, "failed (10)": 10}
    assert sum(drawn.values()) <= 80
    assert data["sampled"] == "ok in step 0: 1 in 9; ok in step 1: 1 in 7; timeout in step 1: 1 in 2"
