"""A step's participants and enters (controller/participants.py): built once for every step
alike, built again when what they depend on changed."""

from pathlib import Path

from netspec.controller.engine.participants import StepPlans
from netspec.controller.experiment.load import parse
from netspec.protocol import messages as m
from support import PROGRAMS

TEXT = f"""\
experiment: plans
hosts: {{a: {{}}, b: {{}}}}
components:
  x: {{host: a, program: {PROGRAMS / 'actor.py'}, params: {{size: 1}}}}
  y: {{host: b, program: {PROGRAMS / 'actor.py'}}}
  z: {{host: b, command: [sleep, "60"], stop: collect}}
schedule:
  - launch
  - start_logging
  - work
  - {{phase: work, params: {{size: 2}}}}
  - work
  - start_logging
  - collect
"""


def test_a_step_alike_reuses_its_plan_and_a_change_of_registered_or_ended_builds_it_again():
    plan = parse(TEXT, Path("/tmp/plans.yaml"))
    launch, logging, work, bigger, again, logging_again, _ = plan.schedule
    plans, registered, ended = StepPlans(plan), {}, {}
    assert plans.of(launch, registered, ended).participants == {"a": ["x"], "b": ["y", "z"]}
    registered.update(x=["work"], y=["work"])
    first = plans.of(work, registered, ended)
    assert first.participants == {"a": ["x"], "b": ["y"]} and first.count == 2
    assert first.enters["a"] == [{"name": "x", "params": {"size": 1}}]
    assert plans.of(again, registered, ended) is first
    assert plans.of(bigger, registered, ended).enters["a"] == [{"name": "x", "params": {"size": 2}}]
    node = plans.of(logging, registered, ended)
    assert node.enters == {"a": [{"name": m.NODE, "params": {}}], "b": [{"name": m.NODE, "params": {}}]}
    assert plans.of(logging_again, registered, ended) is node
    ended["y"] = "ended in phase 'work'"
    assert plans.of(again, registered, ended).participants == {"a": ["x"]}
