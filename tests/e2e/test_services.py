"""Logging end to end: start_logging and stop_logging reach every component and the
daemon's node stream, and every stream lands in the run directory, failed runs included."""

import sys
from pathlib import Path

import pytest
from netspec.datastream.reader import StreamReader
from support import latest_record, ns_control

pytestmark = pytest.mark.e2e

LOGGED = """\
experiment: t
hosts: {a: {}, b: {}}
components:
  one: {host: a, program: ACTOR, args: ["launch,work,collect,stop_logging"], params: PARAMS_ONE}
  two: {host: b, program: ACTOR, args: ["launch,work,collect"], params: {ticks: 3}}
streams:
  main: {enable: [PLAY]}
  ticks: {enable: [PLAY/tick], components: [two]}
schedule:
  - launch
  - start_logging
  - work
  - stop_logging
  - collect
"""


def streams(run: Path, host: str) -> dict[str, StreamReader]:
    return {p.name.split(".")[0] + "." + p.name.split(".")[1]: StreamReader(p)
            for p in sorted((run / "hosts" / host / "streams").glob("*.ds"))}


def phases(reader: StreamReader) -> list[str]:
    return [r.value for r in reader if r.entity.full_name == "PLAY/phase"]


def test_streams_cover_the_logging_window_and_land_under_each_host(experiment, tmp_path):
    path = experiment(LOGGED.replace("PARAMS_ONE", "{ticks: 2}"))
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run = tmp_path / "runs" / "latest"
    a, b = streams(run, "a"), streams(run, "b")
    assert sorted(a) == ["clksync.clksync", "main.one", "netspecd.netspecd"]
    assert sorted(b) == ["clksync.clksync", "main.two", "netspecd.netspecd", "ticks.two"]
    # launch and collect lie outside the window; stop_logging's callback is still inside.
    assert phases(a["main.one"]) == ["work", "stop_logging"]
    assert phases(b["main.two"]) == ["work"]
    assert [r.tag for r in b["ticks.two"] if r.entity.group == "PLAY"] == [0, 1, 2]
    node = [(r.entity.name, r.value["phase"], r.value["component"])
            for r in a["netspecd.netspecd"] if r.entity.group == "NETSPECD"]
    assert node == [("enter", "start_logging", "one"), ("ack", "start_logging", "one"),
                    ("enter", "work", "one"), ("ack", "work", "one")]
    for reader in [*a.values(), *b.values()]:
        list(reader)
        assert reader.closed_cleanly and reader.warnings == [], reader.path
        assert reader.header.run == latest_record(tmp_path / "runs")["id"]
    record = latest_record(tmp_path / "runs")
    assert sorted(record["hosts"]["b"]["streams"]) == sorted(
        f"hosts/b/streams/{p.name}" for p in (run / "hosts" / "b" / "streams").iterdir())

    dumped = ns_control("dump", str(run / "hosts"), "--match", "PLAY/tick", cwd=tmp_path)
    assert dumped.returncode == 0, dumped.stderr
    ticks = sorted(" ".join(line.split()[1:]) for line in dumped.stdout.splitlines()
                   if "PLAY/tick" in line)
    assert ticks == sorted([*[f"a/one PLAY/tick tag {i}" for i in (0, 1, 0, 1)],
                            *[f"b/two PLAY/tick tag {i}" for i in (0, 1, 2, 0, 1, 2)]])


def test_a_failed_run_still_gathers_every_stream_with_what_was_logged(experiment, tmp_path):
    path = experiment(LOGGED.replace("PARAMS_ONE", "{fail_in: work, ticks: 5}"))
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 1
    run = tmp_path / "runs" / "latest"
    one = streams(run, "a")["main.one"]
    assert [r.tag for r in one if r.entity.full_name == "PLAY/tick"] == list(range(5))
    # The component was ended by SIGTERM at reset: nodelib flushed and closed its stream.
    assert one.closed_cleanly


def test_a_plain_command_using_nodelib_logs_for_as_long_as_it_runs(experiment, tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("from netspec import nodelib\n"
                      "tick = nodelib.event('PLAIN', 'tick')\n"
                      "for i in range(3):\n    tick.log(i)\n")
    path = experiment(f"""\
        experiment: plain
        components:
          plain: {{command: [{sys.executable}, {script}], start: work}}
        streams:
          s: {{enable: [PLAIN]}}
        schedule: [launch, work]
        """)
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (stream,) = (tmp_path / "runs" / "latest" / "hosts" / "local" / "streams").glob("s.plain.*.ds")
    reader = StreamReader(stream)
    assert [r.tag for r in reader if r.entity.group == "PLAIN"] == [0, 1, 2]
    assert reader.closed_cleanly
