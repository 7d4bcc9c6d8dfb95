"""End to end: a k-of-n participant's end belongs to the step it happened in, however late
its report comes. The race the same file once lost and once won (a `need: 1` step whose
component calls os._exit(1) at the end of its callback: exit 3 or exit 1) is made to
happen every time: the component ends only once its daemon has sent it the next step's
message, so its end is seen by a daemon already in that step."""

import re

import pytest
from support import PROGRAMS, latest_record, ns_control

K_OF_N_EXIT = """\
experiment: kofnexit
hosts: {a: {}, b: {}}
components:
  one: {host: a, program: PROGRAM, args: ["launch,work,collect"]}
  two: {host: b, program: PROGRAM, args: ["PHASES"], params: {exit_in: work, exit_code: 1}}
schedule:
  - launch
  - {phase: work, need: 1}
  - collect
"""


@pytest.mark.parametrize("phases", ["launch,work", "launch,work,collect"],
                         ids=["stopped-at-collect", "entered-in-collect"])
def test_a_k_of_n_participant_that_ends_itself_as_the_next_step_begins_fails_in_its_own_step(
        experiment, tmp_path, phases):
    # Without collect registered, the daemon's collect asks it to STOP while it is still in
    # work's callback; with it, the daemon sends collect's enter. Either way it ends in work.
    path = experiment(K_OF_N_EXIT.replace("PROGRAM", str(PROGRAMS / "exit_when_told.py"))
                      .replace("PHASES", phases))
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path)
    assert done.returncode == 3, done.stderr
    assert re.search(r"partial: every step got through, but 1 participant\(s\) did not:\n"
                     r"  phase 'work', host b: two: exited 1 after [0-9.]+ s\n\Z", done.stderr), done.stderr
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "partial", record["error"]
    work = record["steps"][1]["hosts"]["b"]["components"]["two"]
    assert (work["status"], work["outcome"], work.get("died")) == ("error", "error", True), work
    collect = record["steps"][2]
    assert collect["status"] == "ok"
    assert collect["hosts"]["b"]["components"].get("two", {"outcome": "skipped"})["outcome"] == "skipped"
    assert record["components"]["b/two"]["returncode"] == 1
