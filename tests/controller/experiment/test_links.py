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


def test_a_campaign_sweeps_a_named_links_condition_and_its_zero_delay_keeps_the_path(experiment):
    from netspec.controller.experiment.load import parse

    plan = load(experiment(HOSTS + """\
links:
  - {name: wan, between: [a, b], delay: 10ms, loss: 1%}
  - {from: a, to: c, rate: 10mbit}
schedule: [launch, run]
sweep:
  params:
    links.wan.delay: [0ms, 50ms]
    links.wan.loss: [0%, 2%]
"""))
    points = plan.campaign.points
    assert [(p["links.wan.delay"], p["links.wan.loss"]) for p in points] == [
        ("0ms", "0%"), ("0ms", "2%"), ("50ms", "0%"), ("50ms", "2%")]
    zero = parse(plan.text, plan.path, point=points[0])
    # the 0 point's delay keeps its path: a condition, not none (it crosses the same backend)
    assert zero.link_states()[0][("a", "b")] == LinkCondition(path=True)
    assert zero.link_states()[0][("a", "b")].needs() == ["delay"]
    assert zero.link_states()[0][("a", "c")] == LinkCondition(rate_mbit=10.0)  # not swept: as written
    last = parse(plan.text, plan.path, point=points[3])
    assert last.link_states()[0][("a", "b")] == LinkCondition(delay_ms=50.0, loss_pct=2.0)
    assert "name: wan" in last.text and "delay: 50ms" in last.text


def test_a_swept_link_is_checked_by_name_key_and_value(experiment):
    links = "links:\n  - {name: wan, between: [a, b], delay: 10ms}\n"
    with pytest.raises(ConfigErrors) as caught:
        load(experiment(HOSTS + links + "  - {name: wan, from: a, to: c}\nschedule: [launch]\n"))
    assert "exp.yaml:10: links[1].name: link name 'wan' is also given at line 9: a name is one rule's" in str(
        caught.value)
    one = HOSTS + links + "schedule: [launch]\nsweep:\n  params:\n"
    cases = {
        "links.wna.delay: [1ms]": ("sweep.params.links.wna.delay: no link is named 'wna' "
                                   "(did you mean 'wan'?)"),
        "links.wan.distribution: [normal]": ("sweep.params.links.wan.distribution: a sweep varies a link's "
                                             "delay, jitter, loss, rate, not 'distribution'"),
        "links.wan.delay: [1ms, soon]": ("sweep.params.links.wan.delay[1]: 'soon' makes link 'wan' one the "
                                         "file cannot have: links[0].delay")}
    for axis, said in cases.items():
        with pytest.raises(ConfigErrors) as caught:
            load(experiment(one + f"    {axis}\n"))
        assert said in str(caught.value), (axis, str(caught.value))


def test_a_bare_number_for_a_delay_or_a_loss_is_said_with_the_unit_it_lacked(experiment):
    with pytest.raises(ConfigErrors) as caught:
        load(experiment(HOSTS + "links:\n  - {from: a, to: b, loss: 1}\n  - {from: b, to: a, delay: 20}\n"
                        "  - {from: a, to: c, rate: 10}\nschedule: [launch]\n"))
    said = [str(e).rpartition("/")[2] for e in caught.value.errors]
    assert said == [
        "exp.yaml:9: links[0].loss: expected a percentage (1%, 0.5%) or a mapping (rate, burst), got the "
        "number 1: did you mean '1%'?",
        "exp.yaml:10: links[1].delay: expected a delay (with its unit: 250us, 10ms, 0.5s), got the number "
        "20: did you mean '20ms'?",
        "exp.yaml:11: links[2].rate: expected string (the rate, as tc writes it: 10mbit, 512kbit, 1gbit), "
        "got the number 10: did you mean '10mbit'?"]


def test_a_delay_no_real_link_has_is_a_warning_with_the_unit_it_likely_meant(experiment):
    plan = load(experiment(HOSTS + "links:\n  - {name: wan, from: a, to: b, delay: 5000s, jitter: 20ms}\n"
                           "schedule: [launch]\nsweep: {params: {links.wan.delay: [10ms, 30000ms]}}\n"))
    assert [w.rpartition("/")[2] for w in plan.warnings] == [
        "exp.yaml:9: links[0].delay: a delay of 5000s is over 10 s, longer than any real link's (a satellite "
        "hop is about 0.3 s): did you mean 5000ms?",
        "exp.yaml:11: sweep.params.links.wan.delay[1]: a delay of 30000ms is over 10 s, longer than any real "
        "link's (a satellite hop is about 0.3 s): did you mean 30000us?"]
