import json
import os
import re
import shutil
import subprocess
import zlib
from pathlib import Path

import msgpack
import pytest
from netspec.controller.engine.summary import run_lines
from netspec.controller.record.rundir import RunDir, find_run, list_runs
from netspec.protocol import ackjournal
from netspec.protocol import kinds as k
from netspec.protocol.acksummary import AckSummary
from netspec.protocol.errors import NetspecError
from netspec.protocol.exits import run_processes
from netspec.protocol.runoutcome import RunOutcome
from netspec.protocol.runrecord import RUN_FORMAT, CutShort, Entry, Step, StepHost, read_run
from support import ns_control, start_run, wait_for


def make_run(root, name="exp"):
    return RunDir.create(root, name, "experiment: x\n")


def test_a_new_run_has_its_file_record_and_latest_link(tmp_path):
    run = make_run(tmp_path)
    assert (run.path / "experiment.yaml").read_text() == "experiment: x\n"
    assert read_run(run.path).status == "running"
    assert (tmp_path / "latest").resolve() == run.path.resolve()
    run.finish(RunOutcome("ok"))
    record = read_run(run.path)
    assert record.status == "ok" and record.duration_s >= 0 and record.format == RUN_FORMAT


def test_runs_are_found_by_latest_by_id_suffix_and_by_path(tmp_path):
    first, second = make_run(tmp_path), make_run(tmp_path, "other")
    assert find_run(tmp_path, "latest") == second.path.resolve()
    assert find_run(tmp_path, first.id[-6:]) == first.path
    assert find_run(tmp_path, str(first.path)) == first.path.resolve()
    assert [r.id for _, r in list_runs(tmp_path)] == [first.id, second.id]
    with pytest.raises(NetspecError, match="no run 'zzz'"):
        find_run(tmp_path, "zzz")


def test_streamed_output_is_kept_as_it_arrives(tmp_path):
    run = make_run(tmp_path)
    run.append_output("h", "c", "stdout", b"a")
    run.append_output("h", "c", "stdout", b"b\n")
    assert (run.path / "hosts" / "h" / "c" / "stdout").read_bytes() == b"ab\n"
    run.close_files()


def test_a_record_of_a_newer_format_is_refused_by_name(tmp_path):
    run = make_run(tmp_path)
    (run.path / "run.json").write_text(json.dumps({"format": RUN_FORMAT + 1}))
    with pytest.raises(NetspecError, match=f"has format {RUN_FORMAT + 1}; this netspec reads up to"):
        read_run(run.path)


def test_a_run_whose_controller_died_is_marked_interrupted_by_the_next_command(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name, pid in (("dead", dead.pid), ("alive", os.getpid())):
        run = RunDir.create(tmp_path / "runs", name, "experiment: x\n")
        run.record.controller.pid = pid
        if name == "dead":
            run.record.controller.pid_started = 1  # a pid reused since is not its controller
        run.save()
    done = ns_control("ls", cwd=tmp_path)
    assert done.returncode == 0
    statuses = {line.split()[1]: line.split()[2] for line in done.stdout.splitlines()[1:]}
    assert statuses == {"dead": "interrupted", "alive": "running"}
    record = json.loads(next((tmp_path / "runs" / "dead").glob("*/run.json")).read_text())
    assert record["status"] == "interrupted"
    assert record["error"]["message"].startswith(f"its controller (pid {dead.pid}) ended without finishing")


def test_the_journal_adds_the_steps_run_json_was_saved_without(tmp_path):
    run = RunDir.create(tmp_path / "runs", "exp", "x: 1\n")
    run.record.steps.append(Step("launch", "running"))
    run.journal_step(0)
    run.save()  # saved mid-step, as a throttled save may be
    run.record.steps[0].status, run.record.steps[0].left_ns = "ok", 2
    run.journal_step(0)
    run.record.steps.append(Step("work", "running"))
    run.journal_step(1)
    run.record.steps[1].hosts = {"a": StepHost(components={})}
    run.save()  # saved while work runs: newer than its journalled start
    with open(run.path / "run.journal", "a") as journal:
        journal.write('{"index": 2, "pha')  # the controller killed mid-line
    record = read_run(run.path)
    assert record.cut_short == [CutShort("run.journal", 17, line=4)]
    assert record.steps == [Step("launch", "ok", left_ns=2),
                            Step("work", "running", hosts={"a": StepHost(components={})})]
    run.finish(RunOutcome("ok"))
    assert not (run.path / "run.journal").exists() and len(read_run(run.path).steps) == 2


def test_summarized_acks_reach_their_step_from_the_ack_journal_and_run_json_at_the_end(tmp_path):
    run = RunDir.create(tmp_path / "runs", "exp", "x: 1\n")
    run.record.steps.append(Step("work", "running", sent_ns=5, hosts={
        "a": StepHost(components={"x": Entry("warning", "slow")})}))
    run.journal_step(0)
    summary = AckSummary()
    summary.add_host("b", [k.Ack(step=0, component="y", status="ok", entered=10, acked=20)])
    summary.add_host("a", [k.Ack(step=0, component="x", status="ok", entered=10, acked=20)])
    run.journal_acks(0, 30, summary.wire().records)
    with open(run.path / ackjournal.ACK_JOURNAL, "ab") as journal:
        journal.write(ackjournal.frame(0, 40, b"x" * 50)[:20])  # the controller killed mid-frame
    record = read_run(run.path)
    assert record.cut_short == [CutShort("run.acks", 20, frame=2, step=0)]
    assert ("  cut short by a kill: run.acks frame 2 (20 bytes, step 0 'work'): the acks it held are "
            "not in this record") in run_lines(run.path, record)
    hosts = record.steps[0].hosts
    entry = Entry("ok", "", entered_ns=10, acked_ns=20, received_ns=30, outcome="ok")
    assert hosts["b"] == StepHost(components={"y": entry}, sent_ns=5, done_ns=30)
    assert hosts["a"].components["x"].status == "warning"  # recorded as itself: it stays
    run.finish(RunOutcome("ok"))
    assert not (run.path / ackjournal.ACK_JOURNAL).exists()
    assert json.loads((run.path / "run.json").read_text())["steps"][0]["hosts"]["b"]["done_ns"] == 30


def test_a_malformed_ack_journal_frame_is_refused_naming_the_file_and_frame(tmp_path):
    run = RunDir.create(tmp_path / "runs", "exp", "x: 1\n", steps=[Step("work", "running")])
    run.journal_acks(0, 30, b"")
    run.journal_acks(0, 30, msgpack.packb(["b", "y", {"status": "ok", "run": "code()"}]))
    with pytest.raises(NetspecError, match=r"run.acks: frame 2: a record that is not \[host, component"):
        read_run(run.path)
    (run.path / ackjournal.ACK_JOURNAL).write_bytes(ackjournal.frame(7, 30, b""))
    with pytest.raises(NetspecError, match=r"run.acks: frame 1: not \[step index, received_ns, records"):
        read_run(run.path)


def test_deflated_records_are_folded_and_records_that_inflate_past_a_frame_are_refused(tmp_path):
    run = RunDir.create(tmp_path / "runs", "exp", "x: 1\n", steps=[Step("work", "running", sent_ns=5)])
    summary = AckSummary()
    summary.add_host("b", [k.Ack(step=0, component="y", status="ok", entered=10, acked=20)])
    run.journal_acks(0, 30, zlib.compress(summary.wire().records), compressed=True)
    assert read_run(run.path).steps[0].hosts["b"].components["y"].acked_ns == 20
    # 17 MB of zeros deflate to 17 kB: a first level may not make the controller inflate them.
    run.journal_acks(0, 40, zlib.compress(bytes(17 << 20)), compressed=True)
    with pytest.raises(NetspecError, match=r"run.acks: frame 2: records that do not inflate whole within"):
        read_run(run.path)


def test_a_journal_line_out_of_order_is_refused_naming_its_line(tmp_path):
    run = RunDir.create(tmp_path / "runs", "exp", "x: 1\n")
    (run.path / "run.journal").write_text('{"index": 0, "phase": "a", "status": "ok"}\n'
                                        '{"index": 5, "phase": "b", "status": "ok"}\n')
    with pytest.raises(NetspecError, match=r"run.journal:2: step index 5 does not follow the 1 steps"):
        read_run(run.path)


def test_ls_says_where_a_partial_and_a_killed_controllers_run_stopped_and_show_what_collect_gathered(
        experiment, tmp_path):
    partial = experiment("""\
        experiment: part
        hosts: {a: {}, b: {}}
        components:
          one: {host: a, program: ACTOR, args: ["launch,work"], params: {fail_in: work}}
          two: {host: b, program: ACTOR, args: ["launch,work"]}
        schedule: [launch, {phase: work, need: 1}]
        """, "partial.yaml")
    assert ns_control("run", "--no-merge", "-q", str(partial), cwd=tmp_path).returncode == 3
    killed = experiment("""\
        experiment: killed
        components:
          c: {program: ACTOR, args: ["launch,work"], params: {hang_in: work, ticks: 10}}
        schedule: [launch, start_logging, {phase: work, deadline: 5m}]
        """, "killed.yaml")
    proc, record = start_run(killed, tmp_path, lambda r: r.get("steps") and r["steps"][-1]["phase"] == "work",
                             "the run to reach phase 'work'")
    proc.kill()
    proc.communicate(timeout=30)
    # Its daemon saw its controller go and ended the run's processes.
    wait_for(lambda: not run_processes(record["id"]), what="the run's processes to end")
    listed = ns_control("ls", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    stopped = {line.split()[1]: line.split()[2:] for line in listed.stdout.splitlines()[1:]}
    assert stopped["part"][0] == "partial" and stopped["part"][-1] == "none"
    assert stopped["killed"][0] == "interrupted" and stopped["killed"][-1] == "work"
    assert "None" not in listed.stdout
    shown = ns_control("show", cwd=tmp_path).stdout
    assert "stopped in phase 'work':" in shown and "what the hosts held was not gathered" in shown
    collected = ns_control("collect", cwd=tmp_path)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    shown = ns_control("show", cwd=tmp_path).stdout
    assert "not gathered" not in shown
    gathered = r"what the hosts held was gathered later by `ns_control collect` at \S+ from its 1 host\n"
    assert re.search(gathered, shown), shown
    record = read_run(tmp_path / "runs" / "latest")
    assert record.collected.hosts == 1 and record.collected.failed == {}
    assert record.error.gathered is True
    (host, gathered), = record.hosts.items()
    salvaged = gathered.salvaged
    assert salvaged.files and salvaged.removed
    # Collected again: nothing new on the host (an output put back as it was gathered, whole), and
    # what the first gathered, and when, stays recorded.
    output = next(f for f in salvaged.files if f.endswith("/stdout"))
    (Path(salvaged.source) / Path(output).parent.name).mkdir(parents=True)
    shutil.copy(tmp_path / "runs" / "latest" / output, Path(salvaged.source) / Path(output).parent.name)
    again = ns_control("collect", cwd=tmp_path)
    assert again.returncode == 0 and f"host {host}: 1 files (0.0 MB)" in again.stdout, \
        again.stdout + again.stderr
    assert not Path(salvaged.source).exists()
    kept = read_run(tmp_path / "runs" / "latest")
    assert (kept.collected, kept.collected_ns) == (record.collected, record.collected_ns)
    assert kept.hosts[host].salvaged == salvaged
