"""What a person sees on a terminal: a bar while a fleet is brought up or gathered, and an
error shared by many hosts said once."""

import io
import json
import os
import shutil
import subprocess
import sys

import netspec.experiment
import pytest
from netspec.controller.engine.summary import LISTED_OK, LiveLine, error_lines
from netspec.controller.engine.terminal import Terminal
from netspec.controller.record.progress import Progress
from netspec.controller.record.results import ComponentResult
from netspec.protocol.errors import ComponentFailed, ConnectionLost, RemoteError, StepFailed
from netspec.protocol.kinds import WireError
from netspec.protocol.runoutcome import EXIT_FAILED, EXIT_PIPE
from netspec.protocol.runrecord import read_run
from support import PROGRAMS, REPO, ns_control

RUN_ID = "20261121T181343Z-23d1a4"


def test_a_fleet_beyond_a_few_hosts_gets_a_bar_on_a_terminal_that_leaves_the_lines_alone():
    screen = io.StringIO()
    terminal = Terminal(screen, bars=True)
    terminal.out("  collect         ", end=False)
    hosts = LISTED_OK + 4
    for done in range(1, hosts + 1):
        terminal.count("collect", done, hosts)
    terminal.out(" and 12 more ok [3 ms]")
    shown = screen.getvalue()
    assert "collect hosts" in shown and f"{hosts}/{hosts}" in shown
    # The open line was ended before the bar drew, and the bar is gone once done.
    assert shown.startswith("  collect         \n") and terminal.bar is None
    assert shown.endswith(" and 12 more ok [3 ms]\n")


def test_no_bar_for_a_few_hosts_or_off_a_terminal():
    for bars, hosts in ((True, LISTED_OK), (False, 100)):
        screen = io.StringIO()
        terminal = Terminal(screen, bars=bars)
        for done in range(1, hosts + 1):
            terminal.count("connect", done, hosts)
        assert screen.getvalue() == "" and terminal.bar is None


def test_hosts_that_failed_alike_are_one_line_each_cause_and_a_host_alone_keeps_its_whole_error():
    failed = {}
    for i in range(12):  # alike but for their names and run times
        result = ComponentResult(f"h{i}", f"c{i}", ["actor.py"], exit_status=3, duration_s=1 + i / 10)
        failed[f"h{i}"] = ComponentFailed(result, "collect")
    for i in range(12, 15):
        failed[f"h{i}"] = ComponentFailed(ComponentResult(f"h{i}", f"c{i}", ["actor.py"]), "collect",
                                          f"failed: c{i} did not end within 2 s of SIGKILL")
    failed["x"] = RemoteError("x", WireError(type="OSError", message="disk full"))
    for host, port in (("p1", 7001), ("p2", 7002)):  # alike but for their addresses
        failed[host] = ConnectionLost(host, "collect", f"cannot connect to 127.0.0.1:{port}: Connect call "
                                      f"failed ('127.0.0.1', {port})")
    lines = error_lines(StepFailed("collect", {**failed, "ok": [{"status": "ok"}]}))
    assert lines == [
        "error: phase 'collect' failed on h0, h1, h2, h3, h4, h5, h6, h7 and 10 more (18 hosts)",
        "  caused by: on 12 hosts (h0, h1, h2 and 9 more) alike: phase 'collect', host h0: component 'c0' "
        "exited 3 after 1.0 s",
        "  caused by: on 3 hosts (h12, h13, h14) alike: phase 'collect', host h12: component 'c12' failed: "
        "c12 did not end within 2 s of SIGKILL",
        "  caused by: on 2 hosts (p1, p2) alike: phase 'collect', host p1: connection lost (cannot connect "
        "to 127.0.0.1:7001: Connect call failed ('127.0.0.1', 7001))",
        "  caused by: host x: OSError: disk full",
        "  (each host's own detail: ns_control show --host HOST)"]
    assert error_lines(StepFailed("collect", {"h3": failed["h3"]})) == [  # alone: its whole error
        "error: phase 'collect' failed on h3",
        "  caused by: phase 'collect', host h3: component 'c3' exited 3 after 1.3 s",
        "    command: actor.py"]


PLAYS = """\
experiment: pipe
hosts: {a: {}}
components:
  one: {host: a, program: ACTOR, args: ["launch,work,collect"], params: {ticks: 3}}
schedule: [launch, start_logging, work, stop_logging, collect]
streams: {play: {enable: [PLAY]}}
"""


def _closed_pipe() -> int:
    """The write end of a pipe whose reader is gone: a write to it fails with EPIPE."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.parametrize("stderr", [subprocess.PIPE, subprocess.STDOUT], ids=["own", "2>&1"])
def test_a_run_whose_reader_goes_away_says_it_once_and_goes_on_to_its_end_gathered_and_merged(
        experiment, tmp_path, stderr):
    proc = subprocess.Popen([sys.executable, "-m", "netspec.controller.cli", "run",
                             str(experiment(PLAYS.replace("ACTOR", str(PROGRAMS / "actor.py"))))],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert proc.stdout.readline().startswith("netspec: running pipe as ")
    proc.stdout.close()  # `| head -1`: the live lines after it have no reader
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    if stderr == subprocess.PIPE:
        assert err == ("netspec: stdout was closed by its reader: nothing more printed on it; the command "
                       "goes on to its end\n")
    # else `2>&1 | head -1`: that notice has no reader either; nothing more is said, the run goes on
    record = read_run(tmp_path / "runs" / "latest")
    assert record.status == "ok"
    assert [s.phase for s in record.steps] == ["launch", "start_logging", "work", "stop_logging", "collect"]
    assert (tmp_path / "runs" / "latest" / "merged" / "events.parquet").exists()


def test_a_command_that_only_prints_ends_quietly_with_141_when_its_reader_is_gone(tmp_path):
    stored = str(REPO / "tests" / "data" / "runs")
    stream = str(REPO / "tests" / "data" / "streams" / "stim-v1.0.ds")
    for command in (["show", "23d1a4", "--runs", stored], ["ls", "--runs", stored], ["dump", stream]):
        write = _closed_pipe()
        try:
            proc = subprocess.run([sys.executable, "-m", "netspec.controller.cli", *command],
                                  stdout=write, stderr=subprocess.PIPE, text=True, timeout=30)
        finally:
            os.close(write)
        assert (proc.returncode, proc.stderr) == (EXIT_PIPE, ""), command


def test_a_broken_pipe_not_stdouts_is_an_error_said(tmp_path):
    # A decoder of the user's whose module writes to a pipe without a reader as it loads: an
    # EPIPE as a socket's or a child's pipe gives one (docker's, SSH's), with stdout unharmed.
    (tmp_path / "epipe.py").write_text("import os\nread, write = os.pipe()\nos.close(read)\n"
                                       "os.write(write, b'x')\n\ndef decode(data):\n    return data\n")
    proc = subprocess.run([sys.executable, "-m", "netspec.controller.cli", "dump",
                           str(REPO / "tests" / "data" / "streams" / "stim-v1.0.ds"), "--decoder",
                           "epipe.py:decode"], cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert (proc.returncode, proc.stdout, proc.stderr) == (EXIT_FAILED, "", "error: Broken pipe\n")


class FailsAtWork:
    """An output that fails as the step `work` begins (a fault of the controller's own, as a
    closed stdout once was, in the engine's own task)."""

    def out(self, text: str, end: bool = True) -> None:
        if text.strip() == "work":
            raise RuntimeError("the output failed")

    def err(self, lines: list[str]) -> None:
        pass

    def count(self, what: str, done: int, total: int) -> None:
        pass


def test_a_run_stopped_by_a_fault_of_the_controller_is_recorded_failed_never_ok_with_steps_missing(
        experiment, tmp_path):
    path = experiment(PLAYS.replace("ACTOR", str(PROGRAMS / "actor.py")))
    with pytest.raises(RuntimeError, match="the output failed"):  # a fault goes on up, as it is
        netspec.experiment.run(path, runs=tmp_path / "runs", output=FailsAtWork())
    record = read_run(tmp_path / "runs" / "latest")
    assert record.status == "failed"
    assert [s.phase for s in record.steps] == ["launch", "start_logging", "work"]
    assert (record.error.type, record.error.message) == ("RuntimeError", "the output failed")


def test_the_notes_before_the_first_step_each_get_a_line_of_their_own():
    screen, live = io.StringIO(), LiveLine()
    terminal = Terminal(screen, bars=False)
    for event in (Progress("notice", text="steps go through a fan-out tree: 3 hosts"),
                  Progress("notice", text="clksync probes every 400 ms"),
                  Progress("step", "launch"), Progress("host", "launch", "a", "ok", 0.2),
                  Progress("notice", text="a note of the step"),
                  Progress("step_done", "launch", seconds=0.2)):
        terminal.out(*live.text(event))
    assert screen.getvalue() == ("  [steps go through a fan-out tree: 3 hosts]\n"
                                 "  [clksync probes every 400 ms]\n"
                                 "  launch           a ok 200 ms  [a note of the step] [200 ms]\n")


def test_show_and_ls_print_a_records_escape_sequences_as_text(tmp_path):
    # A received run's record is data: OSC 52 would set the clipboard, OSC 0 the window's title.
    run = tmp_path / "runs" / "stimulus-response" / RUN_ID
    shutil.copytree(REPO / "tests" / "data" / "runs" / "stimulus-response" / RUN_ID, run)
    record = json.loads((run / "run.json").read_text())
    record["experiment"] = "x\x1b]52;c;aGk=\x07\x9b2J"
    record["steps"][3]["hosts"]["a"]["components"]["server"]["message"] = "oops\x1b]0;owned\x07\rover"
    (run / "run.json").write_text(json.dumps(record))
    for command in (["ls"], ["show", RUN_ID]):
        done = ns_control(*command, "--runs", str(tmp_path / "runs"), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert not set(done.stdout) & {"\x1b", "\x07", "\x9b", "\r"}, done.stdout
        assert "x\\x1b]52;c;aGk=\\x07\\x9b2J" in done.stdout
        if command[0] == "show":
            assert "oops\\x1b]0;owned\\x07\\x0dover" in done.stdout
