import asyncio
import dataclasses

import pytest
from netspec.controller.engine.conditions import Conditions, own_ports
from netspec.controller.experiment.load import load
from netspec.protocol.errors import NetspecError


def test_a_link_naming_a_local_daemon_is_refused_at_launch_too(experiment):
    plan = load(experiment("""\
experiment: wan
hosts:
  a: {address: "10.9.0.1:7420"}
  b: {address: "10.9.0.2:7420"}
components:
  server: {host: a, command: [sleep, "1"]}
links:
  - {from: a, to: b, delay: 10ms}
schedule: [launch]
"""))
    assert Conditions(plan, None, None, None).exclude_tcp == [22, 7420]  # SSH's, the daemons'
    # A plan made otherwise than from a file (the Python API's, a record's): held to it all the same.
    local = dataclasses.replace(plan, hosts=(plan.hosts[0], dataclasses.replace(plan.hosts[1], address=None)))
    with pytest.raises(NetspecError, match="link a -> b: host 'b' is a local daemon: local daemons share"):
        asyncio.run(Conditions(local, None, None, None).check("launch", 0.0))


def test_every_daemons_port_as_reached_is_left_unconditioned_not_only_an_address_says(experiment):
    plan = load(experiment("""\
experiment: wan
hosts:
  a: {address: "10.9.0.1:7420"}
  b: {ssh: h2}
components:
  server: {host: a, command: [sleep, "1"]}
schedule: [launch]
"""))
    # a docker host's daemon on a port of its own, reached directly (a fan-out tree's too)
    assert own_ports(plan, {"a": ("10.9.0.1", 7420), "b": ("172.17.0.3", 7555)}) == [22, 7420, 7555]
