"""The CLI's output as whole text blocks, against a stored run."""

import json
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from netspec.controller.engine.runner import MERGE_INTERRUPTED
from support import PROGRAMS, REPO, latest_record, ns_control, wait_for

STORED = REPO / "tests" / "data" / "runs"
RUN_ID = "20261121T181343Z-23d1a4"


def test_show_summarises_a_stored_run(tmp_path):
    shutil.copytree(STORED, tmp_path / "runs")
    done = ns_control("show", "23d1a4", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == textwrap.dedent(f"""\
        run {RUN_ID}  stimulus-response  ok  460 ms
          dir: runs/stimulus-response/{RUN_ID}
          step             status       time     skew  hosts
          launch           ok          81 ms        -  a ok 72 ms, b ok 80 ms
          sync_clocks      ok          15 ms        -
          start_logging    ok         609 us        -
          listen           ok           2 ms        -  a ok 1 ms
                           a/server: listening on 127.0.0.1:42483
          run              ok         135 ms        -  b ok 134 ms
                           b/client: 2000 round trips: median 65.2 us, p99 102.6 us
          stop_logging     ok         883 us        -
          collect          ok          37 ms        -  a ok 20 ms, b ok 31 ms
                           a/server: answered 2000 stimuli
          clock a: reference
          clock b: offset -0.1 us ± 0.8 us (kernel timestamps, 21 recent exchanges)
          components:
            a/server                 exit 0     246 ms
            b/client                 exit 0     261 ms
        """)


def test_ls_lists_runs_with_their_status(tmp_path):
    done = ns_control("ls", "--runs", str(STORED), cwd=tmp_path)
    assert done.stdout == textwrap.dedent(f"""\
        run                        experiment               status           time  stopped in
        {RUN_ID}    stimulus-response        ok             460 ms
        """)


def test_check_describes_a_valid_file(tmp_path):
    demo = REPO / "experiments" / "stimulus_response" / "stimulus_response.yaml"
    done = ns_control("check", str(demo), cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout == textwrap.dedent(f"""\
        {demo}: ok: experiment 'stimulus-response', 2 host(s), 2 component(s)
          schedule: launch -> sync_clocks -> start_logging -> listen -> run -> stop_logging -> collect
        """)


def test_check_reports_a_typo_with_line_and_suggestion_and_exit_code_2(experiment, tmp_path):
    path = experiment("experiment: x\ncomponents:\n  c: {comand: 'true'}\nschedule: [launch]\n")
    done = ns_control("check", str(path), cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (f"error: {path}:3: components.c.comand: unknown key 'comand' "
                           "(did you mean 'command'?)\n")


def test_check_reports_every_error_of_a_file_at_once(experiment, tmp_path):
    path = experiment("""\
        experiment: x
        hosts: {a: {}, b: {adress: "127.0.0.1:7420"}}
        components:
          server: {host: a, program: nowhere.py, args: launch, hots: a}
          load: {host: c, command: [sleep, "5"], start: run, stop: collect}
          pub: {host: a, command: "sleep 1", params: {count: 3}, start: go}
        schedule:
          - launch
          - {phase: run, deadline: 5 minutes}
          - {phase: go, components: [load]}
        sweep: {params: {pub.cuont: [1, 2]}}
        repeat: {runs: 2, metric: interval hopp}
        analysis: {pairs: {hop: {start: A/b, end: A/c}}}
        """)
    done = ns_control("check", str(path), cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert [line.split(": ")[1:3] for line in lines[:-1]] == [
        [f"{path}:2", "hosts.b.adress"],
        [f"{path}:4", "components.server.args"],
        [f"{path}:4", "components.server.hots"],
        [f"{path}:4", "components.server.program"],
        [f"{path}:5", "components.load.host"],
        [f"{path}:6", "components.pub.start"],
        [f"{path}:9", "schedule[1].deadline"],
        [f"{path}:11", "sweep.params.pub.cuont"],
        [f"{path}:12", "repeat.metric"],
    ]
    assert "it would never start" in lines[5] and "did you mean 'count'" in lines[7]
    assert "no pair 'hopp' in analysis.pairs (did you mean 'hop'?)" in lines[8]
    assert lines[-1] == f"9 errors in {path}"


def test_debug_shows_the_traceback_given_before_or_after_the_subcommand(tmp_path):
    for argv in (["--debug", "show", "nothing"], ["show", "nothing", "--debug"]):
        done = ns_control(*argv, cwd=tmp_path)
        assert done.returncode == 1
        assert done.stderr.startswith("Traceback (most recent call last):\n"), argv
        assert done.stderr.endswith("error: no run 'nothing' under runs\n")
    assert ns_control("show", "nothing", cwd=tmp_path).stderr == "error: no run 'nothing' under runs\n"


def test_show_of_an_unknown_run_says_so(tmp_path):
    done = ns_control("show", "nope", "--runs", str(STORED), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == f"error: no run 'nope' under {STORED}\n"


STREAM = REPO / "tests" / "data" / "streams" / "stim-v1.0.ds"


def test_dump_narrates_a_stored_format_1_0_stream(tmp_path):
    done = ns_control("dump", str(STREAM), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == textwrap.dedent("""\
        stim-v1.0.ds: stream 'stim' of client (pid 1617) on host b, run 20261121T000000Z-abcdef
          format 1.0, CLOCK_REALTIME, normal, created 2026-11-21 19:03:42 UTC
        22:26:40.000000000  STIM/send                tag 0
        22:26:40.000064400  STIM/rtt                 tag 0  64.400 us  (from 22:26:40.000000000)
        22:26:40.000070000  STIM/note                tag 1  'warm-up done'
        22:26:40.000080000  STIM/answered            = 2000
        22:26:40.000090000  STIM/rtt_us              n 16  mean 77.1562  below 0  above 1  [0,10):5 [10,20):10
        22:26:40.000100000  CAMP/cpu                 user=12.5  system=3.0
        19:03:42.959744838  DS/close                 clean close: 12 records in 2 chunks
        """)


def test_dump_of_a_damaged_stream_says_what_was_lost_and_exits_1(tmp_path):
    damaged = tmp_path / "damaged.ds"
    data = bytearray(STREAM.read_bytes())
    data[-20] ^= 0xFF  # inside the last chunk: the close record
    damaged.write_bytes(bytes(data))
    done = ns_control("dump", str(damaged), "--match", "STIM/send", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines()[2:] == [
        "22:26:40.000000000  STIM/send                tag 0",
        "22:26:40.000100000  DS/lost                  LOST 1 records: chunk 3 fails its CRC; the rest "
        "of the file (31 bytes) is unreadable"]
    assert done.stderr.splitlines() == [
        f"warning: {damaged}: lost 1 records: chunk 3 fails its CRC; the rest of the file (31 bytes) "
        "is unreadable",
        f"warning: {damaged}: no clean close record: the writer was killed or is still running "
        "(records it still held in memory, at most one chunk, are not in the file)"]


def test_no_merge_is_refused_for_a_campaign_whose_runs_must_be_merged(experiment, tmp_path):
    path = experiment("experiment: c\ncomponents:\n  x: {command: [\"true\"]}\nschedule: [launch]\n"
                      "repeat: {runs: 2}\n")
    done = ns_control("run", str(path), "--no-merge", cwd=tmp_path)
    assert done.returncode == 1
    assert "a campaign's repeat and report need each run merged: --no-merge applies to a single run" \
        in done.stderr
    assert not (tmp_path / "runs" / "campaigns").exists()


def test_a_run_starts_without_the_merges_or_sshs_libraries():
    # Every ns_control command pays for what its start imports: a run of local hosts loads
    # numpy, pyarrow, DuckDB and paramiko only if it merges or reaches an SSH host.
    probe = ("import sys, netspec.controller.cli.main, netspec.controller.engine.run, "
             "netspec.controller.experiment.load; "
             "print(sorted(m for m in ('numpy', 'pyarrow', 'duckdb', 'paramiko', 'scipy', 'matplotlib') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


SLOW_FILTER = '''\
import time
from pathlib import Path


def hold(rel, node, *, flag):
    """The first merge says it reached this node, then holds until it is interrupted."""
    if not Path(flag).exists():
        Path(flag).write_text("")
        time.sleep(60)
'''


def test_ctrl_c_during_the_merge_ends_with_130_and_says_fetch_merges_again(experiment, tmp_path):
    (tmp_path / "slow.py").write_text(SLOW_FILTER)
    began = tmp_path / "merge-began"
    path = experiment(f"""\
        experiment: held
        components:
          c: {{program: ACTOR, args: ["launch,work"], params: {{ticks: 3}}}}
        schedule: [launch, start_logging, work, stop_logging]
        analysis:
          graph:
            held: {{filter: "slow.py:hold", input: events, flag: "{began}"}}
        """)
    proc = subprocess.Popen([sys.executable, "-m", "netspec.controller.cli", "run", str(path)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(began.exists, timeout=60, what="the merge to reach the held node")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 130, stderr
    record = latest_record(tmp_path / "runs")
    assert "Traceback" not in stderr
    assert stderr.endswith(f"`ns_control fetch {record['id']}` merges again\n"), stderr
    # The run went well; its merge did not end, and run.json says so until a merge does.
    assert record["status"] == "ok" and record["merge"] == MERGE_INTERRUPTED
    merged = tmp_path / "runs" / "latest" / "merged"
    assert not (merged / "summary.json").exists()  # the half-made result set is not current
    again = ns_control("fetch", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert (merged / "summary.json").exists() and latest_record(tmp_path / "runs")["merge"] is None


def test_a_step_failed_alike_on_thirty_hosts_is_one_line_that_counts_them(experiment, tmp_path):
    hosts = 30
    components = "\n".join(f'  c{i}: {{host: h{i}, program: ACTOR, args: ["launch,work"], '
                           'params: {hang_in: work}}' for i in range(hosts))
    path = experiment("experiment: many\nhosts: {" + ", ".join(f"h{i}: {{}}" for i in range(hosts))
                      + "}\ncomponents:\n" + components + "\nschedule:\n  - launch\n"
                      "  - {phase: work, deadline: 1s}\n")
    done = ns_control("run", "--no-merge", "--quiet", str(path), cwd=tmp_path)
    assert done.returncode == 1
    alike = ("on 30 hosts (h0, h1, h2 and 27 more) alike: phase 'work', host h0: component 'c0' did not "
             "finish within the deadline of 1 s")
    assert done.stderr.splitlines()[:3] == [
        "error: phase 'work' failed on h0, h1, h2, h3, h4, h5, h6, h7 and 22 more (30 hosts)",
        f"  caused by: {alike}",
        "  (each host's own detail: ns_control show --host HOST)"]
    assert latest_record(tmp_path / "runs")["error"]["causes"] == [alike]


def test_components_of_many_hosts_that_end_alike_uncleanly_are_one_partial_cause(experiment, tmp_path):
    hosts = 12
    # Each ignores the SIGTERM of its stop, and is killed when its grace is over; the gate holds
    # the run until every one has set its trap (a SIGTERM before it is a clean end).
    stubborn = "trap '' TERM; touch {dir}/ready.c{i}.go; while true; do sleep 0.1; done"
    components = "\n".join(
        f'  c{i}: {{host: h{i}, command: "{stubborn.format(dir=tmp_path, i=i)}", stop: collect}}'
        for i in range(hosts))
    gate = (f"  gate: {{host: h0, program: {PROGRAMS / 'waiter.py'}, args: [ready], "
            f"params: {{dir: {tmp_path}, count: {hosts}}}}}")
    path = experiment("experiment: unclean\nhosts: {" + ", ".join(f"h{i}: {{}}" for i in range(hosts))
                      + "}\ncomponents:\n" + components + "\n" + gate
                      + "\nschedule: [launch, {phase: ready, components: [gate]}, collect]\n")
    done = ns_control("run", "--no-merge", "--quiet", str(path), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    cause = ("on 12 hosts (h0, h1, h2 and 9 more) alike: host h0: c0: was killed by SIGKILL at its end "
             "(it did not end when asked, so netspec killed it)")
    assert done.stderr.endswith("partial: every step got through, but 12 component(s) did not end cleanly:\n"
                                f"  {cause}\n"), done.stderr
    assert latest_record(tmp_path / "runs")["error"]["causes"] == [cause]
    # show lists the first 8 and counts the rest by how they ended.
    shown = ns_control("show", cwd=tmp_path).stdout
    assert shown.count(" signal 9 ") == 8 and "\n    and 4 more signal 9\n" in shown, shown


def test_an_error_without_a_file_name_is_said_without_an_empty_one(tmp_path):
    # A campaign whose counted runs hold result sets of an older netspec: refused, said once.
    stored = REPO / "tests" / "data" / "campaigns" / "sized" / "20261126T023317Z-978e2e" / "campaign.json"
    campaign = tmp_path / "sized"
    campaign.mkdir()
    (campaign / "campaign.json").write_text(stored.read_text().replace("/tmp/campaignrec_gen/runs",
                                                                       str(tmp_path / "runs")))
    for run in json.loads((campaign / "campaign.json").read_text())["points"][1]["runs"]:
        (Path(run["path"]) / "merged").mkdir(parents=True)
        shutil.copy(STORED / "stimulus-response" / RUN_ID / "run.json", Path(run["path"]) / "run.json")
        (Path(run["path"]) / "merged" / "summary.json").write_text('{"format": 0}')
    done = ns_control("report", str(campaign), cwd=tmp_path)
    merged = tmp_path / "runs" / "sized" / "20261126T023341Z-24c6d5" / "merged"
    assert (done.returncode, done.stderr) == (1, f"error: {merged}: a result set of an older netspec: "
                                                 "merge the run again (ns_control fetch)\n")
