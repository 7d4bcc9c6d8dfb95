import pytest
from netspec.controller.experiment.faults import parse_size
from netspec.controller.experiment.load import load
from netspec.protocol.errors import ConfigError

FILE = """\
experiment: f
hosts: {a: {}, b: {}}
components:
  server: {host: a, command: [sleep, "5"], start: launch, stop: run}
schedule: [launch, run]
faults:
FAULTS"""


def test_faults_resolve_to_their_host_phase_and_instant(experiment):
    plan = load(experiment(FILE.replace("FAULTS", """\
  - {kill: server, at: {phase: run, after: 2s}}
  - {pause: server, at: {after: 500ms}, for: 1s}
  - {cpu: b, at: {phase: run, after: 0s}, for: 2s}
  - {disk: b, at: {phase: run, after: 0s}, for: 1s, size: 16MiB}
  - {kill_daemon: b, at: {after: 3s}}
""")))
    assert [(f.kind, f.target, f.host, f.phase, f.after_s, f.for_s, f.size, f.workers, f.line)
            for f in plan.faults] == [
        ("kill", "server", "a", "run", 2.0, None, None, None, 7),
        ("pause", "server", "a", None, 0.5, 1.0, None, None, 8),
        ("cpu", "b", "b", "run", 0.0, 2.0, None, 1, 9),
        ("disk", "b", "b", "run", 0.0, 1.0, 16 << 20, None, 10),
        ("kill_daemon", "b", "b", None, 3.0, None, None, None, 11)]
    assert [f.target for f in plan.resolved().faults] == ["server", "server", "b", "b", "b"]


def test_every_fault_error_is_said_at_once_naming_the_line_and_key(experiment, tmp_path):
    with pytest.raises(ConfigError) as err:
        load(experiment(FILE.replace("FAULTS", """\
  - {kill: sever, at: {phase: run, after: 2s}}
  - {pause: server, at: {phase: runn, after: 1s}}
  - {kill: server, terminate: server, at: {after: 0s}}
  - {memory: a, at: {after: 0s}, size: 5GB}
  - {disk: c, at: {after: 1s}, size: 1MB, for: 1s, workers: 2}
  - {kill: server, at: {after: 1s}, for: 1s}
""")))
    path = tmp_path / "exp.yaml"
    assert [str(e) for e in err.value.errors] == [
        f"{path}:7: faults[0].kill: unknown component 'sever' (did you mean 'server'?)",
        f"{path}:8: faults[1].at.phase: unknown phase 'runn' (did you mean 'run'?)",
        f"{path}:9: faults[2]: give exactly one kind of fault (kill, terminate, restart, start, pause, "
        "resume, cpu, memory, disk, partition, heal, kill_daemon); this gives kill, terminate",
        f"{path}:10: faults[3]: a memory pressure lasts a while: give 'for' (at most 3600 s)",
        f"{path}:10: faults[3].size: 5000000000 bytes: a pressure's size is more than 0 and at most "
        "1073741824 (1 GiB)",
        f"{path}:11: faults[4].disk: unknown host 'c'",
        f"{path}:12: faults[5].for: 'for' is how long a pause, a partition or a pressure lasts; a kill "
        "takes none"]


def test_a_size_is_bytes_or_a_number_with_a_unit():
    assert [parse_size(v) for v in (3, "3", "1.5kB", "2MiB", "1 GB")] == [3, 3, 1500, 2 << 20, 10**9]
    with pytest.raises(ValueError, match="not a size"):
        parse_size("3 parsecs")


def test_a_partition_is_one_fault_done_per_direction_by_the_host_it_leaves(experiment, tmp_path):
    ssh = FILE.replace("hosts: {a: {}, b: {}}", "hosts: {a: {ssh: 10.0.0.1}, b: {ssh: 10.0.0.2}, c: {}}")
    plan = load(experiment(ssh.replace("FAULTS", """\
  - {partition: [a, b], at: {phase: run, after: 1s}, for: 2s}
  - {heal: [b, a], at: {phase: run, after: 5s}}
""")))
    assert [(f.kind, f.host, f.target, f.for_s, f.line) for f in plan.faults] == [
        ("partition", "a", "b", 2.0, 7), ("heal", "b", "a", None, 8)]
    assert [f.directions() for f in plan.faults] == [[("a", "b"), ("b", "a")], [("b", "a"), ("a", "b")]]
    with pytest.raises(ConfigError) as err:
        load(experiment(ssh.replace("FAULTS", "  - {partition: [a, c], at: {after: 0s}}\n")))
    assert [str(e).partition(": local daemons")[0] for e in err.value.errors] == [
        f"{tmp_path / 'exp.yaml'}:7: faults[0].partition[1]: host 'c' is a local daemon"]


def test_a_partition_isolates_a_host_or_splits_the_hosts_into_sides_in_one_entry(experiment, tmp_path):
    four = FILE.replace("hosts: {a: {}, b: {}}", "hosts: {a: {ssh: 10.0.0.1}, b: {ssh: 10.0.0.2}, "
                        "c: {ssh: 10.0.0.3}, d: {ssh: 10.0.0.4}}")
    plan = load(experiment(four.replace("FAULTS", """\
  - {kill: server, at: {phase: run, after: 1s}}
  - {partition: {isolate: b}, at: {phase: run, after: 1s}}
  - {partition: [[a, b], [c, d]], at: {phase: run, after: 2s}, for: 1s}
  - {heal: {isolate: b}, at: {phase: run, after: 3s}}
""")))
    _, isolate, split, heal = plan.faults
    assert set(isolate.directions()) == {("b", "a"), ("b", "c"), ("b", "d"), ("a", "b"), ("c", "b"),
                                         ("d", "b")}
    assert (isolate.host, isolate.target) == ("b", "a, c, d")
    across = {(x, y) for x in "ab" for y in "cd"}
    assert set(split.directions()) == across | {(y, x) for x, y in across}
    assert (split.host, split.target) == ("a, b", "c, d")
    assert heal.kind == "heal" and set(heal.directions()) == set(isolate.directions())
    with pytest.raises(ConfigError) as err:
        load(experiment(four.replace("FAULTS", "  - {partition: {alone: b}, at: {after: 0s}}\n")))
    assert "exp.yaml:7: faults[0].partition.alone: unknown key 'alone'" in str(err.value)


def test_a_fault_aimed_at_a_role_has_its_target_chosen_at_run_time(experiment, tmp_path):
    three = FILE.replace("hosts: {a: {}, b: {}}", "hosts: {a: {ssh: 10.0.0.1}, b: {ssh: 10.0.0.2}, "
                         "c: {ssh: 10.0.0.3}}")
    plan = load(experiment(three.replace("FAULTS", """\
  - {kill: {role: leader}, at: {phase: run, after: 1s}}
  - {partition: {isolate: {role: leader}}, at: {phase: run, after: 2s}, for: 1s}
  - {heal: {isolate: {role: leader}}, at: {phase: run, after: 3s}}
""")))
    kill, partition, heal = plan.faults
    assert (kill.role, kill.target, kill.host) == ("leader", "", "")
    assert partition.role == "leader" and partition.sides == (("a", "b", "c"),)
    assert set(partition.directions(isolated="b")) == {("b", "a"), ("b", "c"), ("a", "b"), ("c", "b")}
    assert len(heal.directions()) == 6  # what it may come to heal: each is checked at launch
    with pytest.raises(ConfigError) as err:
        load(experiment(three.replace("FAULTS", """\
  - {kill: {role: "lead er"}, at: {phase: run, after: 1s}}
  - {start: {role: leader}, at: {phase: run, after: 1s}}
""")))
    assert [str(e).split(": ", 2)[1] for e in err.value.errors] == ["faults[0].kill.role", "faults[1].start"]
    assert "'lead er' is not a valid value (a role a program claims" in str(err.value.errors[0])


def test_a_component_fault_before_its_component_starts_or_after_it_stops_is_refused(experiment, tmp_path):
    with pytest.raises(ConfigError) as err:
        load(experiment("""\
experiment: f
components:
  server: {command: [sleep, "5"], start: run, stop: drain}
schedule: [launch, run, drain, after]
faults:
  - {kill: server, at: {phase: launch, after: 0s}}
  - {pause: server, at: {phase: after, after: 1s}, for: 1s}
  - {kill: server, at: {phase: drain, after: 0s}}
"""))
    path = tmp_path / "exp.yaml"
    assert [str(e) for e in err.value.errors] == [
        f"{path}:6: faults[0].at.phase: 'server' starts at phase 'run', after this fault's phase "
        "'launch': give 'run' or a later one",
        f"{path}:7: faults[1].at.phase: 'server' is stopped at phase 'drain', before this fault's "
        "phase 'after': give 'drain' or an earlier one"]


def test_a_start_needs_its_component_ended_before_it_by_the_schedule(experiment, tmp_path):
    with pytest.raises(ConfigError) as err:
        load(experiment(FILE.replace("FAULTS", """\
  - {start: server, at: {phase: run, after: 1s}}
  - {kill: server, at: {phase: run, after: 2s}}
  - {start: server, at: {phase: run, after: 3s}}
""")))
    assert [str(e) for e in err.value.errors] == [
        f"{tmp_path / 'exp.yaml'}:7: faults[0].start: a start of 'server' needs it ended first: no kill "
        "or terminate of 'server' comes before it (a restart kills and starts it in one)"]
    plan = load(experiment(FILE.replace("FAULTS", """\
  - {terminate: server, at: {phase: launch, after: 0s}}
  - {start: server, at: {phase: run, after: 0s}}
""")))
    assert [(f.kind, f.phase) for f in plan.faults] == [("terminate", "launch"), ("start", "run")]
