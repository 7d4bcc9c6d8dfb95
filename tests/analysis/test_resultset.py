"""A run's result set made by merge_run from real streams: the analysis graph runs whatever
else the run has or lacks, and no code a run directory names runs unless the user names it."""

from __future__ import annotations

import json
from pathlib import Path

from netspec.analysis.resultset import RESULT_FORMAT, is_current, merge_run, read_summary
from netspec.analysis.usercode import UserCode
from netspec.datastream.instrument import Datastreams
from netspec.datastream.writer import StreamConfig, StreamInfo
from support import ns_control, write_stream

T0 = 1_700_000_000_000_000_000


def a_run(tmp_path: Path, analysis: dict) -> Path:
    run = tmp_path / "run"
    write_stream(run / "hosts" / "p" / "streams", "p", "primary", [("note", T0 + i, i) for i in range(10)])
    (run / "run.json").write_text(json.dumps({
        "format": 1, "id": "r", "experiment": "graph", "status": "ok",
        "plan": {"source": str(tmp_path / "exp.yaml"), "analysis": analysis}, "hosts": {}, "steps": []}))
    return run


def test_a_graph_runs_in_a_run_with_nothing_to_plot(tmp_path):
    run = a_run(tmp_path, {"graph": {"notes": {"filter": "select", "input": "events", "entity": "KV/*"},
                                     "notes_csv": {"filter": "export", "input": "notes", "format": "csv"}}})
    result = merge_run(run)
    assert result.plots == []
    assert not [w for w in result.warnings if "analysis node" in w]
    assert len((run / "merged" / "notes_csv.csv").read_text().splitlines()) == 11


def test_a_filter_the_runs_record_names_runs_only_when_the_user_names_it(tmp_path):
    marker = tmp_path / "ran"
    (tmp_path / "mine.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                      "def same(rel, node):\n    return rel\n")
    run = a_run(tmp_path, {"graph": {"mine": {"filter": f"{tmp_path}/mine.py:same", "input": "events"}}})
    result = merge_run(run)
    assert not marker.exists() and not (run / "merged" / "mine.csv").exists()
    assert (f"analysis node mine: filter {tmp_path}/mine.py:same not run: the run's record names it, and a "
            "filter of your own runs only when you name it (the experiment file you run, or ns_control "
            f"fetch --filter {tmp_path}/mine.py:same)") in result.warnings
    result = merge_run(run, code=UserCode(filters=("mine.py:same",), base=tmp_path))
    assert marker.exists() and not [w for w in result.warnings if "analysis node" in w]


def test_an_imported_bundle_whose_record_names_os_system_is_fetched_and_nothing_runs(tmp_path):
    """The stream's event names os:system as its decoder and carries a command as its data;
    the bundle's own run.json allows that decoder."""
    marker = tmp_path / "ran"
    source = tmp_path / "made" / "hostile" / "20261125T000000Z-0dd0a1"  # imported into tmp_path/runs
    ds = Datastreams()
    event = ds.event("EVIL", "command", decoder="os:system")
    ds.start([StreamConfig("evil", enable=("EVIL",))],
             StreamInfo(source / "hosts" / "a" / "streams", run="r", host="a", component="c"),
             exit_hooks=False)
    event.log(1, f"touch {marker}".encode())
    ds.stop()
    (source / "run.json").write_text(json.dumps({
        "format": 1, "id": source.name, "experiment": "hostile", "status": "ok",
        "plan": {"experiment": "hostile", "source": str(source / "exp.yaml"),
                 "analysis": {"decoders": ["os:system"]}}, "hosts": {}, "steps": []}))
    exported = ns_control("export", str(source), "--to", str(tmp_path / "hostile.tar.gz"), cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    imported = ns_control("import", str(tmp_path / "hostile.tar.gz"), cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    fetched = ns_control("fetch", source.name, cwd=tmp_path)
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    assert not marker.exists()
    assert ("warning: decoder os:system not run: the run's record names it, and a decoder runs only when "
            "you name it (the experiment file you run, or ns_control fetch --decoder os:system); its events' "
            "data stays raw") in fetched.stdout


def test_summary_json_is_written_and_read_typed_and_one_that_is_not_a_summary_is_not_current(tmp_path):
    run = a_run(tmp_path, {})
    merged = merge_run(run)
    summary = read_summary(run / "merged")
    assert (summary.format, summary.run, summary.records) == (RESULT_FORMAT, "r", merged.records)
    assert summary.records >= 10 and summary.warnings == merged.warnings
    assert is_current(run / "merged")
    (run / "merged" / "summary.json").write_text("[]")  # JSON, but no summary
    assert read_summary(run / "merged") is None and not is_current(run / "merged")


def test_a_merge_again_leaves_alone_what_the_last_summary_names_outside_the_result_set_and_says_so(tmp_path):
    run = a_run(tmp_path, {})
    merge_run(run)
    outside = tmp_path / "precious.txt"
    outside.write_text("mine\n")
    summary = json.loads((run / "merged" / "summary.json").read_text())
    summary["files"] += ["../../precious.txt", "/etc/hostname"]  # as a tampered file could say
    (run / "merged" / "summary.json").write_text(json.dumps(summary))
    again = merge_run(run)
    assert outside.read_text() == "mine\n"
    said = [w for w in again.warnings if "left alone" in w]
    assert len(said) == 2 and "'../../precious.txt'" in said[0] and "'/etc/hostname'" in said[1], said
    assert "events.parquet" in again.files and "../../precious.txt" not in again.files
