"""End to end: the real CLI drives real daemons and real component processes."""

import contextlib
import csv
import hashlib
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import duckdb
import psutil
import pyarrow.parquet as pq
import pytest
from demorun import DEMO
from netspec.controller.engine.summary import run_lines
from netspec.datastream.reader import StreamReader
from netspec.protocol.exits import run_processes
from netspec.protocol.runrecord import read_run
from netspec.web import timeline
from support import PROGRAMS, latest_record, load_record, ns_control, start_run, wait_for

pytestmark = pytest.mark.e2e

TWO_HOSTS = """\
experiment: t
hosts: {a: {}, b: {}}
components:
  one: {host: a, program: ACTOR, args: ["launch,prepare,work,collect"], params: PARAMS_ONE}
  two: {host: b, program: ACTOR, args: ["launch,prepare,work,collect"], params: PARAMS_TWO}
schedule:
  - launch
  - prepare
  - {phase: work, deadline: DEADLINE}
  - collect
"""


def two_hosts(experiment, one="{}", two="{}", deadline="30s"):
    return experiment(TWO_HOSTS.replace("PARAMS_ONE", one).replace("PARAMS_TWO", two)
                      .replace("DEADLINE", deadline))


def k_of_n(experiment, one, work):
    """TWO_HOSTS whose component one has params `one` and whose step work is `work` (a k-of-n step)."""
    return experiment(TWO_HOSTS.replace("PARAMS_ONE", one).replace("PARAMS_TWO", "{}")
                      .replace("{phase: work, deadline: DEADLINE}", work))


def two_hosts_logging(experiment, one, two):
    """TWO_HOSTS logging from after launch, the actors' PLAY events in stream `play`; work's
    deadline is far off (a test ends the run itself)."""
    text = (TWO_HOSTS.replace("  - launch\n", "  - launch\n  - start_logging\n")
            + "streams: {play: {enable: [PLAY]}}\n")
    return experiment(text.replace("PARAMS_ONE", one).replace("PARAMS_TWO", two).replace("DEADLINE", "5m"))


def test_the_demo_runs_every_phase_in_order_and_ends_ok(demo):
    assert demo.record["status"] == "ok"
    assert [s["phase"] for s in demo.record["steps"]] == [
        "launch", "sync_clocks", "start_logging", "listen", "run", "stop_logging", "collect"]
    assert all(s["status"] == "ok" for s in demo.record["steps"])


def test_the_demo_gathers_every_components_files_output_and_exit(demo):
    rtts = (demo.run / "hosts" / "b" / "client" / "files" / "rtt.csv").read_text().splitlines()
    assert len(rtts) == 2001
    assert "2000 round trips" in (demo.run / "hosts" / "b" / "client" / "stdout").read_text()
    assert json.loads((demo.run / "hosts" / "a" / "server" / "exit.json").read_text())["returncode"] == 0
    assert json.loads((demo.run / "hosts" / "a" / "facts.json").read_text())["cpu_count"] > 0


def test_the_demo_keeps_its_experiment_and_a_copy_of_each_program(demo):
    assert (demo.run / "experiment.yaml").read_text() == DEMO.read_text()
    program = DEMO.parent / "stimulus.py"
    kept = demo.record["programs"][str(program)]
    assert (demo.run / kept["copy"]).read_bytes() == program.read_bytes()
    assert kept["sha256"] == hashlib.sha256(program.read_bytes()).hexdigest()


def test_the_demo_summary_shows_the_clients_result_and_the_streams_gathered(demo):
    assert "b/client: 2000 round trips: median" in demo.stdout
    took = re.search(r"^took (.+) in all: (.+) the run, (.+) the merge, (.+) the rest$",
                     demo.stdout, re.M)
    assert took, demo.stdout
    assert re.search(r"intervals on one timeline in " + re.escape(took[3]) + " -> ", demo.stdout)
    assert "streams: a 4 files, b 4 files" in demo.stdout


def test_the_demo_records_each_hosts_clock_bound_and_each_ack_in_order(demo):
    assert demo.record["hosts"]["b"]["clock"]["bound_ns"] > 0
    run_step = demo.record["steps"][4]["hosts"]["b"]["components"]["client"]
    assert run_step["entered_ns"] <= run_step["acked_ns"] <= run_step["received_ns"]


def test_the_demo_run_directory_is_private_to_its_owner(demo):
    run = demo.run.resolve()
    shared = [f"{p.stat().st_mode & 0o777:o} {p}" for p in [run, *run.rglob("*")]
              if not p.is_symlink() and p.stat().st_mode & 0o777 != (0o700 if p.is_dir() else 0o600)]
    assert not shared


def test_the_demo_leaves_no_process(demo):
    assert not run_processes(demo.record["id"])


def test_the_demo_streams_hold_every_stimulus_and_round_trip(demo):
    client = next((demo.run / "hosts" / "b" / "streams").glob("stim.client.*.ds"))
    server = next((demo.run / "hosts" / "a" / "streams").glob("stim.server.*.ds"))
    rtt = [r for r in StreamReader(client) if r.entity.full_name == "STIM/rtt"]
    assert [r.tag for r in rtt] == list(range(2000)) and all(r.value > 0 for r in rtt)
    assert sum(r.entity.full_name == "STIM/stimulus" for r in StreamReader(server)) == 2000


def test_the_demo_camp_stream_samples_the_node_and_the_client_process(demo):
    camp = list(StreamReader(next((demo.run / "hosts" / "b" / "streams").glob("camp.camp.*.ds"))))
    samples = [r.value for r in camp if r.entity.full_name == "CAMP/node"]
    assert {"cpu.user", "net.lo.bytes_recv", "proc.client.cpu_ns"} <= set(samples[0])
    client = [(s["proc.client.cpu_ns"], s["proc.client.pid"]) for s in samples]
    assert client[-1][0] >= client[0][0] > 0 and len({pid for _, pid in client}) == 1


def test_the_demo_result_set_holds_every_table_and_product(demo):
    assert {p.name for p in demo.merged.iterdir()} == {
        "events.parquet", "samples.parquet", "intervals.parquet", "clock.parquet", "phases.parquet",
        "rates.parquet", "usage.parquet", "workload.parquet", "states.parquet", "trace.json", "narration.txt",
        "report.html", "plots", "summary.json", "rtt_csv.csv", "first_story.txt"}


def test_the_demo_pairs_both_legs_of_every_round_trip_causally(demo):
    assert "causality to_server: 2000 matched, every end after its start" in demo.stdout
    assert "causality to_client: 2000 matched, every end after its start" in demo.stdout
    legs = duckdb.sql(f"SELECT name, count(*) FROM '{demo.merged}/intervals.parquet' WHERE source = 'pair' "
                      "GROUP BY name ORDER BY name").fetchall()
    assert legs == [("to_client", 2000), ("to_server", 2000)]


def test_a_pair_that_matches_nothing_is_a_warning_not_a_pass(demo, tmp_path):
    run = tmp_path / "runs" / "ghost" / "r1"
    shutil.copytree(demo.run, run, ignore=shutil.ignore_patterns("merged"))
    record = json.loads((run / "run.json").read_text())
    record["plan"]["analysis"]["pairs"]["ghost"] = {"start": "STIM/sent", "end": "STIM/never"}
    (run / "run.json").write_text(json.dumps(record))
    done = ns_control("fetch", str(run), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "causality ghost: nothing matched, nothing to check" in done.stdout
    warning = "pair ghost matched nothing: no STIM/sent was followed by its STIM/never"
    assert warning in done.stdout
    summary = json.loads((run / "merged" / "summary.json").read_text())
    assert any(w.startswith(warning) for w in summary["warnings"])


def test_the_demo_events_are_on_one_timeline_in_time_order(demo):
    events = pq.read_table(demo.merged / "events.parquet", columns=["ts", "entity"])
    ts = events.column("ts").to_numpy().tolist()
    assert events.num_rows > 8000 and ts == sorted(ts)


def test_the_demo_phases_table_has_each_step_entered_before_acked(demo):
    phases = pq.read_table(demo.merged / "phases.parquet").to_pylist()
    assert {p["phase"] for p in phases} >= {"launch", "run", "collect"}
    assert all(p["acked"] >= p["entered"] for p in phases if p["acked"] and p["entered"])


def test_the_demo_camp_tables_give_samples_rates_usage_and_workload(demo):
    out = demo.merged
    cpu = duckdb.sql(f"SELECT count(*) FROM '{out}/samples.parquet' WHERE field = 'proc.client.cpu_ns'")
    assert cpu.fetchall()[0][0] > 0
    busy = duckdb.sql(f"SELECT min(rate), max(rate) FROM '{out}/rates.parquet' WHERE field = 'cpu.busy_pct'")
    assert 0 <= busy.fetchall()[0][0] <= 100
    usage = duckdb.sql(f"SELECT delta FROM '{out}/usage.parquet' WHERE phase = 'run' AND host = 'b' "
                       "AND field = 'proc.client.cpu_ns'").fetchall()
    assert usage and usage[0][0] > 0
    assert {(w["host"], w["component"]) for w in pq.read_table(out / "workload.parquet").to_pylist()} == {
        ("a", "server"), ("b", "client")}


def test_the_demo_states_table_keeps_each_counters_and_histograms_last_state(demo):
    states = duckdb.sql(f"SELECT entity, value, data FROM '{demo.merged}/states.parquet' "
                        "ORDER BY entity").fetchall()
    assert [s[:2] for s in states[:1]] == [("STIM/answered", 2000.0)] and states[1][0] == "STIM/rtt_us"
    assert sum(json.loads(states[1][2])["counts"]) == 2000 and states[1][1] > 2000 * 5  # sum of us


def test_the_demo_trace_has_both_hosts_every_pair_the_steps_and_cpu(demo):
    trace = json.loads((demo.merged / "trace.json").read_text())["traceEvents"]
    names = {e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"host a", "host b"}
    assert sum(e["ph"] == "b" and e["name"] == "to_client" for e in trace) == 2000
    assert {e["name"] for e in trace if e["ph"] == "X"} >= {"launch", "run", "collect"}
    assert any(e["ph"] == "C" and e["name"] == "cpu busy %" for e in trace)


def test_the_demo_narration_tells_every_event(demo):
    rows = pq.read_metadata(demo.merged / "events.parquet").num_rows
    narration = (demo.merged / "narration.txt").read_text().splitlines()
    assert len(narration) == rows and "STIM/stimulus" in narration[100] + narration[101]


def test_the_demo_plots_are_pngs_of_each_interval_the_clock_and_camp(demo):
    plots = demo.merged / "plots"
    assert {p.name for p in plots.iterdir()} == {
        "interval-STIM_rtt.png", "interval-to_client.png", "interval-to_server.png", "clock.png", "camp.png",
        "rtt_histogram.png"}
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in plots.iterdir())


def test_the_demo_graph_filters_write_their_outputs(demo):
    rtt = (demo.merged / "rtt_csv.csv").read_text().splitlines()
    assert rtt[0].startswith("name,") and 1000 < len(rtt) < 2001 and all(",STIM/rtt," not in r for r in rtt)
    assert len((demo.merged / "first_story.txt").read_text().splitlines()) == 12


def test_a_merge_again_removes_what_the_last_one_wrote_and_no_longer_writes_and_says_only_its_own(
        demo, tmp_path):
    run = tmp_path / "runs" / "stimulus-response" / "r1"
    shutil.copytree(demo.run, run)  # with the demo's result set
    (run / "merged" / "mine.txt").write_text("the user's own\n")
    record = json.loads((run / "run.json").read_text())
    del record["plan"]["analysis"]["graph"]["rtt_csv"]  # a node this merge no longer runs
    (run / "run.json").write_text(json.dumps(record))
    done = ns_control("fetch", str(run), cwd=tmp_path, env=demo.env)
    assert done.returncode == 0, done.stderr
    assert not (run / "merged" / "rtt_csv.csv").exists()  # the last merge's, not this one's
    assert (run / "merged" / "mine.txt").read_text() == "the user's own\n"  # never the merge's
    wrote = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ") and " kB" in line]
    assert "summary.json" in wrote and "first_story.txt" in wrote
    assert "rtt_csv.csv" not in wrote and "mine.txt" not in wrote, done.stdout


def test_results_lists_the_demo_and_report_gives_its_statistics(demo):
    listed = ns_control("results", cwd=demo.where, env=demo.env).stdout
    assert demo.record["id"] in listed and "stimulus-response" in listed
    report = ns_control("report", "latest", "--csv", "report.csv", cwd=demo.where, env=demo.env)
    assert report.returncode == 0, report.stderr
    row = next(line.split() for line in report.stdout.splitlines() if "interval to_client (us)" in line)
    assert row[3] == "2000" and float(row[5]) < float(row[4]) * 2  # count; median below twice the mean
    table = list(csv.DictReader((demo.where / "report.csv").open()))
    assert {r["metric"] for r in table} >= {"interval to_client", "interval STIM/rtt", "cpu busy b"}


def test_report_says_what_differs_between_runs_before_it_compares_them(demo, tmp_path):
    runs = tmp_path / "runs" / "stimulus-response"
    for name in ("base", "other"):
        shutil.copytree(demo.run, runs / name, symlinks=True)
    record = json.loads((runs / "other" / "run.json").read_text())
    record["id"] = "other"
    next(c for c in record["plan"]["components"] if c["name"] == "client")["params"]["count"] = 500
    (runs / "other" / "run.json").write_text(json.dumps(record))
    report = ns_control("report", "base", "other", cwd=tmp_path, env=demo.env)
    assert report.returncode == 0, report.stderr
    assert report.stdout.startswith("other differs from base in 1 way(s):\n  client.count: 2000 -> 500\n")


def test_an_exported_demo_imported_elsewhere_reports_merges_again_and_reruns(demo, tmp_path):
    bundle = tmp_path / "demo.tar.gz"
    done = ns_control("export", "--to", str(bundle), cwd=demo.where, env=demo.env)
    assert done.returncode == 0 and done.stdout.startswith(f"exported {bundle} ("), done.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = ns_control("import", str(bundle), cwd=elsewhere, env=demo.env)
    assert done.returncode == 0, done.stderr
    run_id = demo.record["id"]
    assert (elsewhere / "runs" / "stimulus-response" / run_id / "merged" / "events.parquet").is_file()
    report = ns_control("report", run_id, cwd=elsewhere, env=demo.env)
    assert report.returncode == 0 and "interval to_client (us)" in report.stdout, report.stderr
    # Merged again, into a directory of its own.
    again = elsewhere / "again"
    fetch = ns_control("fetch", run_id, "--to", str(again), cwd=elsewhere, env=demo.env)
    assert fetch.returncode == 0 and "merged: 80" in fetch.stdout, fetch.stderr
    assert "files (" in fetch.stdout and f"MB) into {again}:\n" in fetch.stdout
    assert "\n  events.parquet  " in fetch.stdout and (again / "events.parquet").is_file()
    rerun = ns_control("rerun", run_id, cwd=elsewhere, env=demo.env)
    assert rerun.returncode == 0, rerun.stderr
    assert latest_record(elsewhere / "runs")["rerun_of"] == run_id


def _raise_line() -> int:
    """The line of actor.py that raises a phase's failure, as a traceback names it."""
    lines = (PROGRAMS / "actor.py").read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if "raise RuntimeError(" in line)


def test_a_component_failing_in_its_second_phase_stops_the_run_and_shows_its_output(
        experiment, tmp_path):
    path = two_hosts(experiment, two="{fail_in: prepare, lines: 15}")
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 1
    assert "phase 'prepare', host b: component 'two' failed: RuntimeError: two fails in prepare" \
        in done.stderr
    said = [line.strip() for line in done.stderr.splitlines()]
    assert said[said.index("last lines of stdout:") + 10] == "| two line 14"
    stderr = said.index("last lines of stderr:")
    assert said[stderr + 1:stderr + 3] == ["| two stderr in launch", "| two stderr in prepare"]
    assert "| two line 4" not in done.stderr  # only the last ten lines
    assert ("    its traceback (last lines; `ns_control show` has all):\n"
            "    | Traceback (most recent call last):\n"
            f'    |   File "{PROGRAMS / "actor.py"}", line {_raise_line()}, in act\n'
            '    |     raise RuntimeError(f"{ctx.component} fails in {ctx.phase} as asked")\n'
            "    | RuntimeError: two fails in prepare as asked\n") in done.stderr
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "failed" and record["error"]["phase"] == "prepare"
    assert [s["phase"] for s in record["steps"]] == ["launch", "prepare"]
    assert "RuntimeError" in record["steps"][1]["hosts"]["b"]["components"]["two"]["traceback"]
    run = tmp_path / "runs" / "latest" / "hosts"
    assert "two line 14" in (run / "b" / "two" / "stdout").read_text()
    # The other host's output is gathered too: what it printed in the step every host
    # finished (in prepare, it may be ended before it prints).
    assert "one stderr in launch" in (run / "a" / "one" / "stderr").read_text()
    assert json.loads((run / "a" / "one" / "exit.json").read_text())["returncode"] < 0
    assert not run_processes(record["id"])


def test_a_component_still_in_the_failed_step_is_ended_with_the_run_not_named_a_cause(experiment, tmp_path):
    path = two_hosts(experiment, one="{hang_in: prepare}", two="{fail_in: prepare}")
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 1 and "component 'two' failed" in done.stderr
    run = (tmp_path / "runs" / "latest").resolve()
    record = read_run(run)
    prepare = next(s for s in record.steps if s.phase == "prepare")
    one = prepare.hosts["a"].components["one"]
    assert one.status == "error" and one.outcome == "ended", one
    # The results browser's triage names the one that failed, not the one the run's end ended.
    assert [(f["host"], f["component"]) for f in timeline.failures(record, run)] == [("b", "two")]
    line = next(x for x in run_lines(run, read_run(run)) if x.lstrip().startswith("prepare"))
    assert "a ended" in line and "b FAIL" in line, line


def test_a_failed_runs_follow_on_warnings_are_counted_after_its_error_not_piled_over_it(experiment, tmp_path):
    path = experiment("""\
        experiment: launchfail
        hosts: {a: {}, b: {}}
        components:
          one: {host: a, program: ACTOR, args: ["launch,work"], params: {fail_in: launch}}
          two: {host: b, program: ACTOR, args: ["launch,work"]}
        streams: {play: {enable: [PLAY]}}
        analysis:
          pairs:
            there: {start: PLAY/phase, end: PLAY/tick}
            back: {start: PLAY/tick, end: PLAY/phase}
        schedule: [launch, start_logging, work]
        """)
    done = ns_control("run", str(path), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    error = "error: phase 'launch' failed on a\n  caused by: phase 'launch', host a: component 'one' failed: "
    assert done.stderr.startswith(error), done.stderr
    # Each pair matched nothing, as nothing ran: said as a count after the error, not line by line.
    assert "warning:" not in done.stderr and "matched nothing" not in done.stderr, done.stderr
    merged = next(line for line in done.stderr.splitlines() if line.startswith("merged: "))
    counted = re.search(f"\n{re.escape(merged)}\n  (\\d+) warning\\(s\\), most likely following from the "
                        "error above", done.stderr)
    assert counted, done.stderr
    summary = json.loads((tmp_path / "runs" / "latest" / "merged" / "summary.json").read_text())
    assert sum("matched nothing" in w for w in summary["warnings"]) == 2
    # Both pairs' at least; a loaded machine may add its own (CAMP's skipped slots), all counted.
    assert int(counted.group(1)) == len(summary["warnings"]) >= 2, summary["warnings"]


def test_a_step_that_misses_its_deadline_names_who_it_waited_for(experiment, tmp_path):
    path = two_hosts(experiment, one="{hang_in: work}", deadline="1s")
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 1
    assert "error: phase 'work' failed on a\n" in done.stderr
    assert ("caused by: phase 'work', host a: component 'one' did not finish within the "
            "deadline of 1 s") in done.stderr
    said = [line.strip() for line in done.stderr.splitlines()]
    assert said[said.index("last lines of stderr:") + 3] == "| one stderr in work", done.stderr
    record = latest_record(tmp_path / "runs")
    assert record["steps"][-1]["status"] == "failed"
    assert record["steps"][-1]["hosts"]["b"]["components"]["two"]["status"] == "ok"
    assert not run_processes(record["id"])


def test_a_component_that_dies_between_phases_fails_the_run_at_once(experiment, tmp_path):
    path = two_hosts(experiment, one="{exit_in: prepare, exit_code: 7}")
    # Its step's deadline far off: a run that waited it out would outlive ns_control's 60 s.
    path.write_text(path.read_text().replace("  - prepare\n", "  - {phase: prepare, deadline: 5m}\n"))
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path, timeout=60)
    assert done.returncode == 1
    assert "component 'one'" in done.stderr and "exited 7" in done.stderr
    assert latest_record(tmp_path / "runs")["components"]["a/one"]["returncode"] == 7


def start_run_until_work(path, tmp_path):
    """Start `ns_control run FILE`; return the process and the run's record once the run
    has entered phase 'work'."""
    def working(record: dict) -> bool:
        return bool(record.get("steps")) and record["steps"][-1]["phase"] == "work"
    return start_run(path, tmp_path, working, "the run to reach phase 'work'")


def start_run_hanging_in_work(experiment, tmp_path):
    """Start `ns_control run` where host a's component hangs in phase 'work' after leaving
    an orphan; return the process and the run's record once all that is under way."""
    path = two_hosts(experiment, one="{hang_in: work, orphan: true}", deadline="5m")
    proc, record = start_run_until_work(path, tmp_path)
    wait_for(lambda: len(run_processes(record["id"])) >= 3, what="the orphan to start")
    return proc, record


def test_ctrl_c_stops_the_run_gathers_outputs_and_leaves_no_process(experiment, tmp_path):
    proc, record = start_run_hanging_in_work(experiment, tmp_path)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "interrupted by the user in phase 'work'" in stderr
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "interrupted"
    assert (tmp_path / "runs" / "latest" / "hosts" / "a" / "one" / "stderr").exists()
    assert not run_processes(record["id"])


def test_plain_commands_start_and_stop_at_named_phases(experiment, tmp_path):
    path = experiment("""\
        experiment: plain
        components:
          actor: {program: ACTOR, args: ["work"]}
          server: {command: "echo started; exec sleep 300", start: launch, stop: work}
          oneshot: {command: [sh, -c, "echo params=$NETSPEC_PARAMS"], start: work, params: {n: 3}}
        schedule: [launch, work, collect]
        """)
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    comps = tmp_path / "runs" / "latest" / "hosts" / "local"
    assert (comps / "server" / "stdout").read_text() == "started\n"
    assert (comps / "oneshot" / "stdout").read_text() == 'params={"n": 3}\n'
    record = latest_record(tmp_path / "runs")
    assert record["components"]["local/server"]["returncode"] == -signal.SIGTERM
    assert not run_processes(record["id"])


def test_a_plain_command_that_fails_shows_its_output(experiment, tmp_path):
    path = experiment("""\
        experiment: plain
        components:
          bad: {command: "echo about to fail; echo oops >&2; exit 3", start: work}
        schedule: [launch, work]
        """)
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 1
    assert "component 'bad' failed: exited 3" in done.stderr
    said = [line.strip() for line in done.stderr.splitlines()]
    at = said.index("last lines of stdout:")
    assert said[at:at + 4] == ["last lines of stdout:", "| about to fail", "last lines of stderr:", "| oops"]


def test_k_of_n_opens_the_barrier_at_k_and_a_failure_among_the_rest_makes_the_run_partial(
        experiment, tmp_path):
    path = k_of_n(experiment, "{fail_in: work}", "{phase: work, need: 1}")
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    # Shown live: on the step's line (in whichever order the hosts finished), or, if it came
    # after the barrier opened, as that step's outcome on a later line.
    work = next(line for line in done.stdout.splitlines() if line.startswith("  work "))
    assert " a FAIL " in work or "\n    work: a/one: failed " in done.stdout, done.stdout
    assert done.stderr.endswith("partial: every step got through, but 1 participant(s) did not:\n"
                                "  phase 'work', host a: one: RuntimeError: one fails in work as asked\n")
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "partial"
    one = record["steps"][2]["hosts"]["a"]["components"]["one"]
    assert (one["status"], one["outcome"]) == ("error", "error")
    assert record["steps"][2]["hosts"]["b"]["components"]["two"]["outcome"] in ("ok", "late")


def test_a_k_of_n_straggler_is_ended_at_the_steps_deadline_and_leaves_the_run(experiment, tmp_path):
    path = k_of_n(experiment, "{hang_in: work}", "{phase: work, need: 1, deadline: 1s}")
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    # On a line of its own, naming it; the step under way goes on on the next.
    own_line = "\n    work: a/one: no ack within the deadline of 1 s: ended\n  collect "
    assert own_line in done.stdout, done.stdout
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "partial"
    assert record["error"]["causes"] == [
        "phase 'work', host a: one: no ack within the deadline of 1 s: ended"]
    assert record["steps"][2]["hosts"]["a"]["components"]["one"]["outcome"] == "killed"
    # Entered in collect before its deadline came, it is said to have been skipped there.
    collect = record["steps"][3]["hosts"]["a"]["components"]["one"]
    assert collect["outcome"] == "skipped" and collect["message"].startswith("ended in phase 'work'")
    assert record["components"]["a/one"]["returncode"] < 0
    assert not run_processes(record["id"])


def test_a_need_that_those_left_cannot_meet_fails_its_step_and_blames_no_ok_ack(experiment, tmp_path):
    path = experiment(TWO_HOSTS.replace("PARAMS_ONE", "{hang_in: work}").replace("PARAMS_TWO", "{}")
                      .replace("launch,prepare,work,collect", "launch,work,rest,collect")
                      .replace("  - prepare\n", "")
                      .replace("{phase: work, deadline: DEADLINE}",
                               "{phase: work, need: 1, deadline: 1s}\n  - {phase: rest, need: 2}"))
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    # one was ended at work's deadline, rest under way: rest has one participant left, and needs two.
    assert ("error: phase 'rest' needs 2 participants to ack (need: 2), but it has only 1 (1 left the "
            "run earlier): it could never get through\n") in done.stderr
    assert "component 'two'" not in done.stderr
    record = latest_record(tmp_path / "runs")
    rest = record["steps"][-1]
    assert (rest["phase"], rest["status"], record["error"]["phase"]) == ("rest", "failed", "rest")


def _component_pid(run_id: str, name: str) -> int | None:
    """The pid of the run's component `name` (its environment names it), if it runs."""
    for proc in run_processes(run_id):
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("NETSPEC_COMPONENT") == name and "actor.py" in " ".join(proc.cmdline()):
                return proc.pid
    return None


def test_a_k_of_n_participant_killed_by_a_signal_fails_over_and_the_run_is_partial(experiment, tmp_path):
    path = k_of_n(experiment, "{hang_in: work}", "{phase: work, need: 1, deadline: 5m}")
    proc, record = start_run(path, tmp_path, lambda r: any(s["phase"] == "work" for s in r.get("steps", [])),
                             "the run to enter phase 'work'")
    pid = wait_for(lambda: _component_pid(record["id"], "one"), what="component one's process")
    os.kill(pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 3, stderr
    # Said on its own line as it happens, and as the cause of the partial run.
    assert "\n    work: a/one died: was killed by SIGKILL\n" in stdout, stdout
    assert stderr.endswith("partial: every step got through, but 1 participant(s) did not:\n"
                           "  phase 'work', host a: one: was killed by SIGKILL\n"), stderr
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "partial" and record["components"]["a/one"]["returncode"] == -signal.SIGKILL
    one = record["steps"][2]["hosts"]["a"]["components"]["one"]
    assert (one["status"], one["outcome"], one["died"]) == ("error", "error", True), one
    # Out of the rest of the run: skipped in collect, if collect began before it died; if it
    # died first, a took no part in collect at all (its one component was out of the run).
    collect = record["steps"][3]["hosts"].get("a", {}).get("components", {})
    assert collect.get("one", {"outcome": "skipped"})["outcome"] == "skipped", collect
    shown = run_lines(tmp_path / "runs" / "latest", read_run(tmp_path / "runs" / "latest"))
    line = next(x for x in shown if x.lstrip().startswith("collect"))
    assert "a FAIL" not in line, line
    assert not run_processes(record["id"])


def test_a_k_of_n_participant_that_exits_mid_phase_makes_the_run_partial_like_a_raise(experiment, tmp_path):
    path = k_of_n(experiment, "{exit_in: work, exit_code: 5}", "{phase: work, need: 1}")
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "partial", record["error"]
    assert len(record["error"]["causes"]) == 1 and record["error"]["causes"][0].startswith(
        "phase 'work', host a: one: "), record["error"]
    assert record["components"]["a/one"]["returncode"] == 5


def test_params_and_published_values_reach_later_phases(experiment, tmp_path):
    path = two_hosts(experiment, one="{publish_in: prepare, value: 42}",
                     two="{echo_in: work, from: one}")
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "b/two: saw 42" in done.stdout
    log = (tmp_path / "runs" / "latest" / "hosts" / "a" / "one" / "files" / "one.log").read_text()
    assert "work on a [('publish_in', 'prepare'), ('value', 42)]" in log  # ctx.host too


def test_a_warning_ack_lets_the_run_go_on(experiment, tmp_path):
    done = ns_control("run", "--no-merge", str(two_hosts(experiment, two="{warn_in: prepare}")), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "b WARN" in done.stdout and "something looks odd" in done.stdout


def test_a_host_with_an_address_uses_the_daemon_already_running(daemon, experiment, tmp_path):
    path = experiment(f"""\
        experiment: remote
        hosts: {{there: {{address: "127.0.0.1:{daemon.port}"}}}}
        components:
          one: {{program: ACTOR, args: [work]}}
        schedule: [launch, work, collect]
        """)
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert daemon.alive
    record = latest_record(tmp_path / "runs")
    assert record["hosts"]["there"]["daemon_pid"] == daemon.proc.pid


def test_an_unreachable_daemon_is_said_in_words_no_step_or_lost_connection_could_have(experiment, tmp_path):
    path = experiment("""\
        experiment: nowhere
        hosts: {gone: {address: "127.0.0.1:1"}, here: {}}
        components:
          one: {host: here, program: ACTOR, args: [connect]}
        schedule: [launch, connect]
        """)
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.startswith(
        "error: could not reach or set up 1 of 2 host(s) before the first step: gone\n"
        "  caused by: could not reach host gone (connecting): cannot connect to 127.0.0.1:1: "), done.stderr
    assert "connection lost" not in done.stderr and "phase 'connect'" not in done.stderr
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "failed" and record["steps"] == [] and not record["error"]["phase"]
    assert record["error"]["causes"][0].startswith("could not reach host gone (connecting): cannot connect")
    shown = ns_control("show", cwd=tmp_path).stdout
    assert "  stopped before the first step:\n    could not reach or set up 1 of 2" in shown, shown


def test_a_daemon_killed_mid_run_fails_the_run_and_its_host_is_salvaged(experiment, tmp_path, netspec_home):
    path = two_hosts_logging(experiment, one="{hang_in: work, orphan: true, ticks: 2000}", two="{ticks: 5}")
    proc, record = start_run_until_work(path, tmp_path)
    wait_for(lambda: len(run_processes(record["id"])) >= 3, what="the orphan to start")

    def flushed() -> bool:
        found = netspec_home.glob(f"work/*-a/{record['id']}/streams/play.one.*.ds")
        return sum(r.entity.name == "tick" for path in found for r in StreamReader(path)) == 2 * 2000
    wait_for(flushed, what="component one's ticks to be flushed")
    os.kill(record["hosts"]["a"]["daemon_pid"], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "phase 'work', host a: connection lost (daemon closed the connection)" in stderr
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "failed"
    hosts = tmp_path / "runs" / "latest" / "hosts"
    assert "one stderr in prepare" in (hosts / "a" / "one" / "stderr").read_text()
    assert (hosts / "b" / "two" / "exit.json").exists()
    # Host a's daemon is gone, but its disk is not: its streams were gathered without it,
    # and nothing of the run is left there.
    salvaged = record["hosts"]["a"]["salvaged"]
    assert salvaged["via"] == "the local filesystem" and salvaged["removed"], salvaged
    assert "[salvaged host a: " in stdout and "its leftovers removed" in stdout
    streams = [f for f in salvaged["files"] if f.startswith("hosts/a/streams/play.one.")]
    assert len(streams) == 1, salvaged
    ticks = [r for r in StreamReader(tmp_path / "runs" / "latest" / streams[0]) if r.entity.name == "tick"]
    assert len(ticks) == 2 * 2000  # every record flushed before the kill is in the run directory
    assert not Path(salvaged["from"]).exists()
    assert not run_processes(record["id"])


def test_a_large_output_arrives_whole(experiment, tmp_path):
    path = experiment("""\
        experiment: chatty
        components:
          chatty: {command: [python3, -c, "import sys; sys.stdout.buffer.write(bytes(range(256)) * 81920)"]}
        schedule: [launch]
        """)
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = (tmp_path / "runs" / "latest" / "hosts" / "local" / "chatty" / "stdout").read_bytes()
    assert out == bytes(range(256)) * 81920  # 20 MiB


def test_a_plain_command_is_done_when_it_exits_even_if_its_child_holds_its_output(
        experiment, tmp_path):
    path = experiment("""\
        experiment: background
        components:
          starter: {command: "sleep 300 & echo started", start: work}
        schedule: [launch, {phase: work, deadline: 10s}]
        """)
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = latest_record(tmp_path / "runs")
    assert not run_processes(record["id"])


def test_a_component_breaking_the_protocol_fails_its_phase_at_once(experiment, tmp_path):
    path = experiment(f"""\
        experiment: garbage
        components:
          bad: {{program: {PROGRAMS / "garbage.py"}}}
        schedule: [launch, {{phase: work, deadline: 5m}}]
        """)
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path, timeout=60)
    assert done.returncode == 1
    assert "broke the netspec protocol" in done.stderr
    assert "exceeds the 16777216-byte limit" in done.stderr


def test_a_plain_program_given_as_program_is_told_apart_at_launch(experiment, tmp_path):
    path = experiment("""\
        experiment: mislabelled
        components:
          sleeper: {program: /bin/sleep, args: ["300"]}
        schedule: [{phase: launch, deadline: 1s}]
        """)
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 1
    assert "never registered its phases" in done.stderr and "`command:`" in done.stderr


KILLED_AT_ITS_END = ("host local: stubborn: was killed by SIGKILL at its end (it did not end when asked, "
                     "so netspec killed it)")


def test_a_command_ignoring_sigterm_is_killed_alone_and_the_run_goes_on(experiment, tmp_path):
    path = experiment("""\
        experiment: stubborn
        components:
          stubborn: {command: "trap '' TERM; while true; do sleep 0.1; done", stop: work}
          actor: {program: ACTOR, args: [later]}
        schedule: [launch, work, later, collect]
        """)
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    # Stopped as asked, if by force: a warning, and the run is not ok (it did not end cleanly).
    assert done.returncode == 3, done.stderr
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "partial" and record["error"]["causes"] == [KILLED_AT_ITS_END]
    work, later = record["steps"][1], record["steps"][2]
    stubborn = work["hosts"]["local"]["components"]["stubborn"]
    assert (stubborn["status"], stubborn["message"]) == ("warning", "killed: idle 5 s after SIGTERM")
    assert later["status"] == "ok"  # the actor was not killed with the stubborn command
    assert later["hosts"]["local"]["components"]["actor"]["status"] == "ok"
    assert record["components"]["local/stubborn"]["returncode"] == -signal.SIGKILL


def test_a_component_killed_at_the_end_because_it_ignored_sigterm_makes_the_run_partial_naming_it(
        experiment, tmp_path):
    path = experiment("""\
        experiment: stubborn
        components:
          stubborn: {command: "trap '' TERM; while true; do sleep 0.1; done", stop: collect}
          actor: {program: ACTOR, args: [work]}
        schedule: [launch, work, collect]
        """)
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    cause = KILLED_AT_ITS_END
    assert done.stderr.endswith("partial: every step got through, but 1 component(s) did not end cleanly:\n"
                                f"  {cause}\n"), done.stderr
    assert f"  partial:\n    every step got through, but 1 component(s) did not end cleanly\n    {cause}\n" \
        in done.stdout, done.stdout
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "partial" and record["error"]["causes"] == [cause]
    assert all(s["status"] == "ok" for s in record["steps"])
    assert record["components"]["local/stubborn"]["returncode"] == -signal.SIGKILL
    assert record["components"]["local/actor"]["returncode"] == 0


def test_a_second_ctrl_c_leaves_at_once_and_still_marks_the_run_interrupted(experiment, tmp_path):
    marker = tmp_path / "got_term"
    path = experiment(f"""\
        experiment: impatient
        components:
          slow: {{command: "trap 'touch {marker}' TERM; while true; do sleep 0.1; done", stop: collect}}
          actor: {{program: ACTOR, args: [work], params: {{hang_in: work}}}}
        schedule: [launch, {{phase: work, deadline: 5m}}, collect]
        """)
    proc, record = start_run_until_work(path, tmp_path)
    run_id = record["id"]
    proc.send_signal(signal.SIGINT)
    # The command ignores the reset's SIGTERM: the controller waits on it, and is told again.
    wait_for(marker.exists, what="the reset's SIGTERM")
    proc.send_signal(signal.SIGINT)
    told = time.monotonic()
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted twice" in stderr
    assert time.monotonic() - told < 5, "the controller waited on its daemons after a second Ctrl-C"
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "interrupted" and record["error"]["message"].startswith("interrupted twice")
    wait_for(lambda: not run_processes(run_id), what="the daemon to end the run by itself")


def test_camp_samples_a_component_that_starts_after_start_logging(experiment, tmp_path):
    path = experiment("""\
        experiment: late
        components:
          spin: {command: "exec python3 -c 'while True: pass'", start: run, stop: stop_logging}
          hold: {command: "sleep 0.5", start: hold}
        services: {camp: {interval_ms: 20, processes: [spin]}}
        schedule: [launch, start_logging, run, hold, stop_logging]
        """)
    done = ns_control("run", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    merged = tmp_path / "runs" / "latest" / "merged"
    (pids,), = duckdb.sql(f"SELECT count(value) FROM '{merged}/samples.parquet' "
                          "WHERE field = 'proc.spin.pid'").fetchall()
    assert pids > 10  # 500 ms at one sample every 20 ms
    (used,), = duckdb.sql(f"SELECT sum(rate) FROM '{merged}/rates.parquet' "
                          "WHERE field = 'proc.spin.cpu_ns'").fetchall()
    assert used > 0
    (component,), = duckdb.sql(f"SELECT component FROM '{merged}/workload.parquet'").fetchall()
    assert component == "spin"


def test_a_killed_controllers_run_is_collected_later_from_its_hosts(experiment, tmp_path, netspec_home):
    path = two_hosts_logging(experiment, one="{hang_in: work, ticks: 300}", two="{ticks: 200}")
    proc, record = start_run_until_work(path, tmp_path)
    wait_for(lambda: len(list(netspec_home.glob(f"work/*/{record['id']}/streams/play.*.ds"))) == 2,
             what="both components' streams to be opened")

    def two_done_working():  # run.json shows a lasting step's acks, saved every second
        hosts = load_record(tmp_path / "runs" / "latest")["steps"][-1]["hosts"]
        return "acked_ns" in hosts.get("b", {}).get("components", {}).get("two", {})
    wait_for(two_done_working, what="two to finish phase 'work'")
    proc.kill()
    proc.communicate(timeout=30)
    # The daemons saw their controller go and ended the run's processes (streams flushed).
    wait_for(lambda: not run_processes(record["id"]), what="the run's processes to end")
    # Exported before it was collected: refused, saying what gathers what the hosts hold.
    early = ns_control("export", record["id"], "--to", str(tmp_path / "early.tar.gz"), cwd=tmp_path)
    assert early.returncode == 1 and f"`ns_control collect {record['id']}` gathers it" in early.stderr
    done = ns_control("collect", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "host a: " in done.stdout and "host b: " in done.stdout and "merged: " in done.stdout
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "interrupted" and record["collected_ns"]
    run = tmp_path / "runs" / "latest"
    # The steps it went through were journalled as they went; run.json has them now.
    assert [s["phase"] for s in record["steps"]] == ["launch", "start_logging", "prepare", "work"]
    assert record["steps"][-2]["status"] == "ok" and record["steps"][-1]["status"] == "running"
    assert not (run / "run.journal").exists()
    for host, component, ticks in (("a", "one", 2 * 300), ("b", "two", 2 * 200)):
        salvaged = record["hosts"][host]["salvaged"]
        assert salvaged["removed"] and not Path(salvaged["from"]).exists(), salvaged
        stream = next((run / "hosts" / host / "streams").glob(f"play.{component}.*.ds"))
        assert sum(r.entity.name == "tick" for r in StreamReader(stream)) == ticks
    assert (run / "merged" / "events.parquet").exists()
    again = ns_control("collect", cwd=tmp_path)  # nothing left: said, and nothing lost
    assert again.returncode == 0 and "0 files" in again.stdout


THREE_DIE_THEN_GO = """\
experiment: diethengo
hosts: {a: {}, b: {}, c: {}}
components:
  x: {host: a, program: ACTOR, args: ["launch,die,go,collect"]}
  y: {host: b, program: ACTOR, args: ["launch,die,go,collect"]}
  z: {host: c, program: ACTOR, args: ["launch,die,go,collect"], params: {exit_in: die, exit_code: 7}}
schedule:
  - launch
  - {phase: die, need: 2}
  - {phase: go, need: GO_NEED}
  - collect
"""


@pytest.mark.parametrize("go_need", [2, 3])
def test_a_participant_that_dies_in_a_k_of_n_step_fails_there_not_in_the_step_after(experiment, tmp_path,
                                                                                       go_need):
    """Its death may be read once the next step is under way: it is still the step it died in
    that it failed, and the next step goes on without it (or, if it cannot, fails naming its need)."""
    path = experiment(THREE_DIE_THEN_GO.replace("GO_NEED", str(go_need)))
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    record = latest_record(tmp_path / "runs")
    die = record["steps"][1]["hosts"]["c"]["components"]["z"]
    assert die.get("died") and die["outcome"] == "error", die
    if go_need == 2:
        assert done.returncode == 3, done.stderr
        assert record["error"]["causes"][0].startswith("phase 'die', host c: z: "), record["error"]
    else:
        assert done.returncode == 1, done.stderr
        assert "phase 'go' needs 3 participants" in done.stderr, done.stderr
        assert "exited 7" not in done.stderr.split("\n")[0], done.stderr
