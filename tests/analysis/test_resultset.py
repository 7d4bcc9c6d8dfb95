"""A run's result set made by merge_run from real streams: the analysis graph runs whatever
else the run has or lacks."""

from __future__ import annotations

import json

from netspec.analysis.resultset import merge_run
from test_pairs import T0, write_stream


def test_a_graph_runs_in_a_run_with_nothing_to_plot(tmp_path):
    run = tmp_path / "run"
    write_stream(run / "hosts" / "p" / "streams", "p", "primary", [("note", T0 + i, i) for i in range(10)])
    graph = {"notes": {"filter": "select", "input": "events", "entity": "KV/*"},
             "notes_csv": {"filter": "export", "input": "notes", "format": "csv"}}
    (run / "run.json").write_text(json.dumps({
        "format": 1, "id": "r", "plan": {"source": str(tmp_path / "exp.yaml"), "analysis": {"graph": graph}},
        "hosts": {}, "steps": []}))
    result = merge_run(run)
    assert result.plots == []
    assert not [w for w in result.warnings if "analysis node" in w]
    assert len((run / "merged" / "notes_csv.csv").read_text().splitlines()) == 11
