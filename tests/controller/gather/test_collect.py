"""`collect` and `rerun` of a run whose run.json has no plan: said, naming the file."""

import pytest
from netspec.controller.record.rundir import RunDir
from netspec.protocol.runoutcome import RunOutcome
from support import ns_control


@pytest.mark.parametrize("command", ["collect", "rerun"])
def test_collect_and_rerun_of_a_run_json_without_a_plan_say_so_naming_the_file(tmp_path, command):
    run = RunDir.create(tmp_path / "runs", "planless", "x: 1\n")
    run.finish(RunOutcome.ended(None, "", [], []))
    done = ns_control(command, str(run.path), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{run.path.resolve()}/run.json has no plan" in done.stderr
