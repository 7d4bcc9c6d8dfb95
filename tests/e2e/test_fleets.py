"""A fleet written in a line, run for real: twenty local daemons of one host group, a
component on each, one of which fails; run.json keeps the groups and `show` says each
group as one line per step."""

import pytest
from netspec.protocol.runrecord import read_run
from support import ns_control

pytestmark = pytest.mark.e2e

FLEET = """\
experiment: fleet
hosts:
  ctl: {}
  peers: {count: 20}
components:
  boss: {host: ctl, command: "true"}
  worker: {group: peers, command: "exit $(( {i} == 7 ))", start: run}
schedule:
  - launch
  - {phase: run, components: [worker], need: 19}
  - collect
"""


def test_a_group_of_twenty_local_hosts_runs_and_show_says_it_by_group(experiment, tmp_path):
    done = ns_control("run", "--no-merge", str(experiment(FLEET)), cwd=tmp_path, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr  # worker-peers-7 exited 1
    run = next((tmp_path / "runs" / "fleet").iterdir())
    record = read_run(run)
    members = [f"peers-{i}" for i in range(1, 21)]
    assert record.plan.groups == {"peers": members}
    assert record.plan.component_groups == {"worker": [f"worker-{m}" for m in members]}
    assert sorted(record.hosts) == sorted(["ctl", *members])
    shown = ns_control("show", cwd=tmp_path).stdout
    run_line = next(line for line in shown.splitlines() if line.startswith("  run ") and "peers" in line)
    assert "peers 19/20 ok (peers-7 FAIL; slowest peers-" in run_line
    assert "peers-3 ok" not in shown  # a member that did well is counted in its group, not listed
    assert "worker                   19/20 exit 0 (worker-peers-7 exit 1; slowest worker-peers-" in shown
    listed = [line.split()[0] for line in shown.splitlines() if line.startswith("    ") and " exit 0" in line]
    assert listed == ["worker", "ctl/boss"]  # the group's components as one line, not twenty
    one = ns_control("show", "--host", "peers-3", cwd=tmp_path).stdout
    assert "peers-3 ok" in one and "peers-3/worker-peers-3" in one  # one host's whole detail
