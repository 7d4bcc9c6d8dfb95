"""A host's facts: one typed record from the daemon's hello to facts.json and back."""

import msgspec
from netspec.daemon.facts import host_facts
from netspec.protocol import kinds as k
from netspec.protocol.hostfacts import HostFacts, read_facts


def test_the_hello_carries_the_facts_as_the_map_it_always_sent_and_facts_json_reads_back_whole(tmp_path):
    facts = host_facts()
    wire = msgspec.msgpack.encode(k.HelloReply(id=1, protocol=5, pid=2, facts=facts))
    as_map = msgspec.msgpack.decode(wire)["facts"]
    assert list(as_map) == list(HostFacts.__struct_fields__)  # every key, in the order it was sent
    assert msgspec.msgpack.decode(wire, type=k.HelloReply).facts == facts
    (tmp_path / "facts.json").write_bytes(msgspec.json.encode(facts))
    assert read_facts(tmp_path / "facts.json") == facts


def test_an_older_or_a_broken_facts_json_reads_as_what_it_said_or_not_at_all(tmp_path):
    older = tmp_path / "older.json"
    older.write_text('{"kernel": "6.1.0", "cpu_count": 2, "hostname": "h", "extra": 1}')
    assert read_facts(older) == HostFacts(kernel="6.1.0", cpu_count=2, hostname="h")
    broken = tmp_path / "broken.json"
    broken.write_text('{"cpu_count": "two"}')
    assert read_facts(broken) is None and read_facts(tmp_path / "missing.json") is None
