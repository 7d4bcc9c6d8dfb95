"""End to end: a component's `stop_grace`, how long it may sit idle once asked to stop before
SIGKILL, honoured by a real daemon both ways: longer than the daemon's 5 s (a service whose
shutdown waits, as etcd's leader hand-over does) and shorter."""

import pytest
from netspec.controller.experiment.load import load
from netspec.protocol.errors import ConfigError
from netspec.protocol.runrecord import read_run
from support import ns_control

pytestmark = pytest.mark.e2e

# Asked to stop (SIGTERM), each sits idle for `wait` seconds, then ends cleanly. The shells
# have half a second (`settled`) to set their trap: a SIGTERM 9 ms after their start, before
# it, ended one by the signal itself.
IDLE_ON_TERM = "trap 'sleep {wait}; exit 0' TERM; while :; do sleep 0.1; done"


def test_a_component_gets_the_stop_grace_its_file_gives(tmp_path):
    path = tmp_path / "grace.yaml"
    path.write_text(f"""\
experiment: grace
components:
  patient: {{command: "{IDLE_ON_TERM.format(wait=6.5)}", start: launch, stop: after, stop_grace: 10s}}
  hurried: {{command: "{IDLE_ON_TERM.format(wait=4)}", start: launch, stop: after, stop_grace: 1s}}
  settle: {{command: [sleep, "0.5"], start: settled}}
schedule: [launch, settled, {{phase: after, deadline: 30s}}, collect]
""")
    run = ns_control("run", str(path), "--no-merge", cwd=tmp_path)
    record = read_run(tmp_path / "runs" / "latest")
    ends = record.components
    # Idle 6.5 s, past the daemon's 5 s: waited for, it ended cleanly.
    assert ends["local/patient"].returncode == 0, run.stdout
    # Idle past its 1 s: killed then, not after 5 s, and the run says so (partial).
    assert ends["local/hurried"].returncode == -9 and ends["local/hurried"].duration_s < 4, run.stdout
    assert (run.returncode, record.status) == (3, "partial"), run.stdout + run.stderr
    [cause] = record.error.causes
    assert "hurried" in cause and "did not end when asked" in cause


def test_a_stop_grace_over_an_hour_is_refused_naming_its_line(experiment, tmp_path):
    with pytest.raises(ConfigError) as err:
        load(experiment("""\
experiment: g
components:
  c: {command: [sleep, "1"], stop_grace: 2h}
schedule: [launch]
"""))
    assert [str(e) for e in err.value.errors] == [
        f"{tmp_path / 'exp.yaml'}:3: components.c.stop_grace: 7200 s is longer than a stop grace "
        "may be (3600 s)"]


def test_a_stop_grace_as_long_as_its_stop_steps_deadline_is_refused(experiment, tmp_path):
    # The step would fail at its deadline while the component still had its grace.
    with pytest.raises(ConfigError) as err:
        load(experiment("""\
experiment: g
components:
  c: {command: [sleep, "100"], start: launch, stop: after, stop_grace: 20s}
schedule: [launch, {phase: after, deadline: 10s}]
"""))
    assert [str(e) for e in err.value.errors] == [
        f"{tmp_path / 'exp.yaml'}:3: components.c.stop_grace: stop_grace 20 s is not shorter than the "
        "deadline of its stop phase 'after' (10 s): give that step a longer deadline, or a shorter grace"]
