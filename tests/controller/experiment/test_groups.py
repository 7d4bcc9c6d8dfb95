"""Fleets written in a line: host groups and a component per host of a group, expanded by
`check` and the loader (controller/experiment/groups.py)."""

from pathlib import Path

import pytest
from netspec.controller.experiment.load import load, parse
from netspec.protocol.errors import ConfigError

FLEET = """\
experiment: fleet
hosts:
  ctl: {}
  peers: {count: 3, ssh: "netspec-h{i}", accept_new_host_key: true}
components:
  boss: {host: ctl, command: "true"}
  worker: {group: peers, command: [echo, "{i}", "{host}"], env: {ME: "{host}"},
           params: {rate: 1, who: "w{i}"}}
schedule:
  - launch
  - {phase: run, components: [boss, worker], need: 4}
  - collect
streams:
  fast: {enable: ["*"], components: [worker]}
services:
  camp: {processes: [worker, boss]}
analysis:
  pairs: {ask: {start: KV/ask, end: KV/done, end_component: worker}}
"""


def test_a_host_group_and_a_component_per_host_expand_wherever_names_are_listed(experiment):
    plan = load(experiment(FLEET))
    members = ("peers-1", "peers-2", "peers-3")
    workers = tuple(f"worker-{m}" for m in members)
    assert plan.groups == {"peers": members} and plan.component_groups == {"worker": workers}
    assert [h.name for h in plan.hosts] == ["ctl", *members]
    assert [h.ssh for h in plan.hosts[1:]] == ["netspec-h1", "netspec-h2", "netspec-h3"]
    assert all(h.accept_new_host_key for h in plan.hosts[1:])
    second = plan.component("worker-peers-2")
    assert (second.host, second.command) == ("peers-2", ("echo", "2", "peers-2"))
    assert second.env == {"ME": "peers-2"} and second.params == {"rate": 1, "who": "w2"}
    assert plan.schedule[1].components == ("boss", *workers) and plan.schedule[1].need == 4
    assert tuple(plan.streams[0].components) == workers
    assert plan.camp.processes == (*workers, "boss")
    assert plan.pairs[0].end_component == "worker"  # the merge counts each of its components
    record = plan.resolved()
    assert record.groups == {"peers": list(members)} and record.component_groups == {"worker": list(workers)}
    assert record.group_of("peers-3") == "peers" and record.group_of("worker-peers-1") == "worker"
    assert record.group_of("boss") is None


def test_a_file_without_groups_records_none():
    plan = parse("experiment: e\ncomponents: {c: {command: 'true'}}\nschedule: [launch]\n", Path("e.yaml"))
    assert plan.groups == {} and plan.resolved().groups == {}


def test_check_names_the_group_and_the_member_at_the_group_s_line(experiment):
    text = """\
    experiment: bad
    hosts:
      ctl: {}
      peers: {count: 3}
      peers-2: {}
      few: {count: 0}
    components:
      worker: {group: peer, command: "true"}
      w2: {group: ctl, command: "true"}
      w3: {group: peers, program: nothere.py}
      w4: {group: peers, host: ctl, command: "true"}
    schedule:
      - {phase: run, components: [w3, nobody], need: 5}
    """
    with pytest.raises(ConfigError) as caught:
        load(experiment(text))
    said = str(caught.value)
    assert ("exp.yaml:4: hosts.peers.count: host group 'peers' names its member 2 'peers-2', and a host "
            "of that name is given too (line 5): rename one") in said
    assert "exp.yaml:6: hosts.few.count: 0 is less than the minimum of 1" in said
    assert "exp.yaml:8: components.worker.group: unknown host group 'peer' (did you mean 'peers'?)" in said
    assert "exp.yaml:9: components.w2.group: unknown host group 'ctl': 'ctl' is one host, not a group" in said
    assert "exp.yaml:10: components.w3[all 3 members].program: program 'nothere.py' not found" in said
    assert "exp.yaml:11: components.w4: give 'host' (one component on it) or 'group'" in said
    # The group stands for its members in a step's list; the unknown name keeps its own index.
    assert "exp.yaml:13: schedule[0].components[3]: unknown component 'nobody'" in said
    assert "exp.yaml:13: schedule[0].need: need 5 of only 4 components" in said


def test_one_member_s_error_names_that_member(experiment):
    text = """\
    experiment: one
    hosts:
      peers: {count: 3}
    components:
      worker: {group: peers, command: "true", start: run}
    schedule: [launch, {phase: run, components: [worker-peers-1]}, collect]
    """
    with pytest.raises(ConfigError) as caught:
        load(experiment(text))
    said = [line.partition(": start phase")[0] for line in str(caught.value).splitlines()]
    assert [line.rpartition("/")[2] for line in said] == [
        "exp.yaml:5: components.worker[worker-peers-2].start",
        "exp.yaml:5: components.worker[worker-peers-3].start"]


def test_a_campaign_sweeps_a_group_s_count_and_its_component_s_param(experiment):
    text = FLEET + "sweep:\n  params:\n    hosts.peers.count: [2, 5]\n    worker.rate: [1, 3]\n"
    plan = load(experiment(text))
    assert [p["hosts.peers.count"] for p in plan.campaign.points] == [2, 2, 5, 5]
    point = plan.campaign.points[3]
    fifth = parse(plan.text, plan.path, point=point)
    assert len(fifth.groups["peers"]) == 5 and "count: 5" in fifth.text
    assert {c.params["rate"] for c in fifth.components if c.name.startswith("worker-")} == {3}
    bad = FLEET + "sweep:\n  params:\n    hosts.peers.count: [2, 0]\n    hosts.nope.ssh: [x]\n"
    with pytest.raises(ConfigError) as caught:
        load(experiment(bad))
    said = str(caught.value)
    assert "sweep.params.hosts.peers.count[1]: 0 makes host 'peers' one the file cannot have" in said
    assert "sweep.params.hosts.nope.ssh: unknown host 'nope'" in said


def test_a_campaign_sweeps_a_docker_group_s_placement_and_check_refuses_a_value_it_cannot_take(experiment):
    text = """\
    experiment: placed
    hosts:
      peers: {count: 2, docker: {cpus: 0.5}}
    components:
      c: {group: peers, command: "true"}
    schedule: [launch, collect]
    sweep:
      params:
        hosts.peers.docker.cpus: [0.5, 2]
        hosts.peers.docker.engine: ["ssh://a@h1", "ssh://a@h2"]
    """
    plan = load(experiment(text))
    point = parse(plan.text, plan.path, point=plan.campaign.points[3])
    assert {(h.docker.cpus, h.docker.engine) for h in point.hosts} == {(2, "ssh://a@h2")}
    with pytest.raises(ConfigError) as caught:
        load(experiment(text.replace("[0.5, 2]", "[0.5, many]")))
    assert ("sweep.params.hosts.peers.docker.cpus[1]: 'many' makes host 'peers' one the file cannot "
            "have: hosts.peers.docker.cpus: expected number, got the string 'many'") in str(caught.value)


def test_a_warning_alike_for_every_member_is_said_once(experiment):
    text = """\
    experiment: w
    hosts:
      peers: {count: 3}
    components:
      worker: {group: peers, command: "true", params: {rate: 1}}
    schedule: [launch, {phase: run, params: {rate: 2}}, collect]
    """
    (said,) = load(experiment(text)).warnings
    assert said.endswith("schedule[1].params.rate: overrides param rate of component 'worker-peers-1' in "
                         "phase 'run': 1 -> 2 (a step that names its components gives them its params "
                         "without a warning) (alike for 2 more of group worker: worker-peers-2 ... "
                         "worker-peers-3)")


def test_link_conditions_name_a_group_for_its_hosts(experiment):
    text = """\
    experiment: l
    hosts:
      hub: {docker: {}}
      peers: {count: 3, docker: {cpus: 0.5}}
    components:
      worker: {group: peers, command: "true"}
    links:
      - {from: peers, to: hub, delay: 10ms}
    schedule: [launch, {phase: run, components: [worker], links: [{from: hub, to: peers, partition: true}]}]
    """
    plan = load(experiment(text)).resolved()
    assert plan.links[0].pairs == [("peers-1", "hub"), ("peers-2", "hub"), ("peers-3", "hub")]


def test_an_unknown_ssh_target_of_every_member_is_one_warning(experiment):
    text = """\
    experiment: w
    hosts:
      peers: {count: 3, ssh: "nosuch-peer-{i}"}
    components:
      worker: {group: peers, command: "true"}
    schedule: [launch, collect]
    """
    (said,) = load(experiment(text)).warnings
    assert said.partition("/exp.yaml:")[2].startswith("3: hosts.peers-1.ssh: host 'peers-1': 'nosuch-peer-1' "
                                                        "is no address, ")
    assert said.endswith("the run cannot reach it (alike for 2 more of group peers: peers-2 ... peers-3)")


def test_a_fan_out_tree_refuses_docker_hosts_beside_others_by_name_and_takes_them_alone(experiment):
    text = """\
    experiment: tree
    fan_out: 2
    hosts:
      l: {}
      d: {count: 3, docker: {}}
    components:
      worker: {group: d, command: "true"}
    schedule: [launch, collect]
    """
    with pytest.raises(ConfigError) as caught:
        load(experiment(text))
    assert str(caught.value).partition("/exp.yaml:")[2] == (
        "5: hosts.d[all 3 members].docker: a docker host is in a fan-out tree (fan_out: at line "
        "2) only with docker hosts of its engine: its daemon, in a container, and those of l cannot reach "
        "one another to relay; drop fan_out, or run every host in containers of one engine")
    alone = load(experiment(text.replace("  l: {}\n", "")))
    assert alone.fan_out == 2 and len(alone.hosts) == 3



def test_a_fan_out_tree_takes_docker_hosts_of_the_default_engine_named_or_not(experiment, monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)  # the default engine: this machine's socket
    text = """\
    experiment: tree
    fan_out: 2
    hosts:
      d: {count: 2, docker: {}}
      e: {docker: {engine: ENGINE}}
    components:
      worker: {group: d, command: "true"}
    schedule: [launch, collect]
    """
    assert len(load(experiment(text.replace("ENGINE", "unix:///var/run/docker.sock"))).hosts) == 3
    with pytest.raises(ConfigError, match=r"hosts\.e\.docker: a docker host is in a fan-out tree"):
        load(experiment(text.replace("ENGINE", "ssh://someone@elsewhere")))
