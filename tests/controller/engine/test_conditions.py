import asyncio
import dataclasses

import pytest
from netspec.controller.engine.conditions import Conditions
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
