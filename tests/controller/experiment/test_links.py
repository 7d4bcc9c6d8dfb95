import pytest
from netspec.controller.experiment.load import load
from netspec.protocol.errors import ConfigErrors
from netspec.protocol.links import LinkCondition

HOSTS = """\
experiment: wan
hosts:
  a: {address: "10.9.0.1:7420"}
  b: {address: "10.9.0.2:7420"}
  c: {ssh: root@10.9.0.3}
components:
  server: {host: a, command: [sleep, "1"]}
"""


def test_links_resolve_to_every_directed_pair_at_every_step(experiment):
    plan = load(experiment(HOSTS + """\
links:
  - {between: [a, b], delay: 10ms, jitter: 500us, distribution: pareto, loss: 1%, rate: 10mbit}
  - {from: a, to: [c], loss: {rate: 5%, burst: 4}}
schedule:
  - launch
  - {phase: run, links: [{between: [a, b], partition: true}]}
  - {phase: heal, links: [{between: [a, b]}, {from: c, to: a, rate: 512kbit}]}
"""))
    wan = LinkCondition(delay_ms=10.0, jitter_ms=0.5, distribution="pareto", loss_pct=1.0, rate_mbit=10.0)
    bursty = LinkCondition(loss_pct=5.0, loss_burst=4.0)
    cut = LinkCondition(partition=True)
    launch, run, heal, collect = plan.link_states()
    assert launch == {("a", "b"): wan, ("b", "a"): wan, ("a", "c"): bursty}
    assert run == {("a", "b"): cut, ("b", "a"): cut, ("a", "c"): bursty}
    assert heal == collect == {("a", "c"): bursty, ("c", "a"): LinkCondition(rate_mbit=0.512)}
    assert plan.link_changes(2) == {("a", "b"): LinkCondition(), ("b", "a"): LinkCondition(),
                                    ("c", "a"): LinkCondition(rate_mbit=0.512)}
    record = plan.resolved()
    assert record.links[1].pairs == [("a", "c")] and record.links[1].line == 10
    assert record.schedule[1].link_state == {"a->b": cut, "b->a": cut, "a->c": bursty}
    assert record.schedule[0].links is None and record.schedule[2].links[0].condition.empty


def test_check_says_every_problem_of_the_links_at_once_naming_line_and_key(experiment):
    with pytest.raises(ConfigErrors) as caught:
        load(experiment("""\
experiment: wan
hosts:
  a: {address: "10.9.0.1:7420"}
  b: {address: "10.9.0.2:7420"}
  here: {}
components:
  server: {host: a, command: [sleep, "1"]}
links:
  - {between: [a, bb], delay: 10ms}
  - {between: [a, here], loss: 1%}
  - {from: a, to: b, partition: true, delay: 5ms}
  - {from: a, to: b, delay: 5ms}
  - {from: a, to: b, delay: 6ms}
  - {from: a, to: a, delay: 6ms}
  - {between: [a, b], distribution: normal}
  - {between: [a, b], delay: 5 ms}
schedule:
  - launch
  - {phase: run, links: [{from: b, to: a, loss: 120%}]}
"""))
    said = [str(e).rpartition("/")[2] for e in caught.value.errors]
    assert said == [
        "exp.yaml:9: links[0].between[1]: unknown host or group 'bb' (did you mean 'b'?)",
        "exp.yaml:10: links[1].between[1]: host 'here' is a local daemon: local daemons share this machine's "
        "network stack, so a condition between them would be on all of their traffic (and this machine's); "
        "give it ssh: or address:, or drop it from the link",
        "exp.yaml:11: links[2].partition: a partition lets no packet through: drop delay, or the partition",
        "exp.yaml:13: links[4]: the direction a -> b is also given at line 12 with another condition "
        "(there delay 5 ms, here delay 6 ms): give each direction once",
        "exp.yaml:14: links[5].to: links a host to itself only: its packets to itself never leave it",
        "exp.yaml:15: links[6].distribution: a distribution is the jitter's: give jitter too",
        "exp.yaml:16: links[7].delay: '5 ms' is not a valid delay (a delay with its unit: 250us, 10ms, 0.5s)",
        "exp.yaml:19: schedule[1].links[0].loss: a loss of 120% is over 100%",
    ]
