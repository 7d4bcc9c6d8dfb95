"""The file's `services: packets:`: its hosts (every one but local daemons, said; a local one
named, refused) and what each captures, as the setup sends it."""

import pytest
from netspec.controller.experiment.load import load
from netspec.protocol.errors import ConfigError
from netspec.protocol.packets import PacketsSpec

FILE = """\
experiment: p
hosts: {a: {ssh: 10.0.0.1}, b: {ssh: 10.0.0.2}, here: {}}
components:
  c: {host: a, command: [sleep, "1"], start: run}
schedule: [launch, run]
services: {packets: PACKETS}
"""


def test_every_host_but_local_daemons_captures_and_local_ones_are_said(experiment):
    plan = load(experiment(FILE.replace("PACKETS", "{ports: [9500], snaplen: 96}")))
    assert plan.packets.hosts == ("a", "b")
    assert plan.packets.spec == PacketsSpec(ports=[9500], snaplen=96)
    assert any("packets: here not captured: local daemons share this machine's network stack" in w
               for w in plan.warnings), plan.warnings
    assert plan.resolved().packets == plan.packets  # run.json keeps it


def test_a_local_daemon_named_or_a_filter_not_of_pcap_filter_words_is_refused(experiment, tmp_path):
    with pytest.raises(ConfigError) as err:
        load(experiment(FILE.replace("PACKETS", "{hosts: [a, here], filter: 'udp; rm -rf /'}")))
    said = [str(e) for e in err.value.errors]
    assert any("services.packets.hosts[1]: host 'here' is a local daemon" in e for e in said), said
    assert any("services.packets.filter" in e for e in said), said
