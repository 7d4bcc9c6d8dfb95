"""Each message of the control protocol is declared once (protocol/kinds.py) and decoded
once, where its frame is read: a message that does not fit is refused there, naming its
kind and the field, and what fits is the map it always was on the wire."""

import msgpack
import msgspec
import pytest
from netspec.protocol import ackjournal, acksummary, reading
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.errors import ProtocolError
from netspec.protocol.events import FROM_DAEMON
from netspec.protocol.wire import MAX_OBJECTS, encode, packed
from support import on_the_wire

REQUESTS = reading.Reader(k.REQUESTS, "request")


def test_a_request_that_does_not_fit_is_refused_at_the_read_naming_its_kind_field_and_id():
    enter = {"t": m.ENTER, "phase": "run", "step": 3, "components": [{"name": "c", "params": {"n": 1}}]}
    assert REQUESTS(packed(enter)) == k.Enter(phase="run", step=3, components=[k.Participant(name="c",
                                                                                            params={"n": 1})])
    for wrong, problem in (({**enter, "step": "3"}, "Expected `int`, got `str` - at `$.step`"),
                           ({**enter, "components": [{"params": {}}]},
                            "Object missing required field `name` - at `$.components[0]`"),
                           ({k_: v for k_, v in enter.items() if k_ != "phase"},
                            "Object missing required field `phase`"),
                           ({**enter, "hosts": {"a": 1}, "lists": [[]]},
                            "hosts ['a'] name no list of `lists` (1 of them)")):
        refused = REQUESTS(packed({**wrong, "id": 7}))
        assert type(refused) is reading.Refused and (refused.kind, refused.id) == (m.ENTER, 7)
        assert refused.problem == f"request 'enter' does not fit: {problem}"
    unknown = REQUESTS(packed({"t": "bogus", "id": "x"}))
    assert (unknown.problem, unknown.id) == ("unknown request type 'bogus'", None)  # an id that is no id


@pytest.mark.parametrize("body", [msgpack.packb([1, 2]), msgpack.packb({"t": 5}), msgpack.packb({"x": 1}),
                                  b"\xc1", msgpack.packb({"t": "hello"})[:-1] + b"\xc1"])
def test_a_body_that_is_no_message_map_is_a_protocol_error_that_ends_the_connection(body):
    with pytest.raises(ProtocolError):
        REQUESTS(body)


def test_a_large_body_is_bounded_before_it_is_decoded_as_by_the_plain_reading():
    flood = msgpack.packb({"t": m.HELLO, "x": [[]] * (MAX_OBJECTS + 1)})
    with pytest.raises(ProtocolError, match="more than 524288 objects"):
        REQUESTS(flood)


def test_a_typed_message_is_on_the_wire_the_map_it_was():
    # An ack as the daemon built it before typed messages, key for key.
    before = {"status": m.ACK_OK, "message": "hi", "started": 5, "t": m.ACK, "step": 2, "component": "c",
              "entered": 10, "acked": 20, "entry_clock": [1, 2], "release": {"at_ns": 9, "missed_ns": 3}}
    ack = k.Ack(status=m.ACK_OK, message="hi", started=5, step=2, component="c", entered=10, acked=20,
                entry_clock=(1, 2), release=k.Release(at_ns=9, missed_ns=3))
    assert msgpack.unpackb(encode(ack)[4:]) == before
    assert FROM_DAEMON(encode(ack)[4:]) == ack
    # An empty message, no published values: left out, as before.
    empty = k.Ack(status=m.ACK_OK, step=0, component="c", entered=1, acked=2)
    assert "message" not in on_the_wire(empty)


def test_every_stamp_an_ack_declares_reaches_its_step_entry_through_the_wire_and_a_summary():
    ack = k.Ack(status=m.ACK_OK, step=0, component="c", entered=1_000, acked=1_900, started=1_200,
                entry_clock=(100, 7), release=k.Release(at_ns=990, bound_ns=7, missed_ns=10,
                                                        realtime_refused=True))
    read = FROM_DAEMON(encode(ack)[4:])
    entry = acksummary.entry(read)
    assert entry == {"status": "ok", "message": "", "entered_ns": 1_000, "acked_ns": 1_900,
                     "started_ns": 1_200, "start_ns": 900, "start_bound_ns": 7, "program_start_ns": 1_100,
                     "release_at_ns": 990, "release_bound_ns": 7, "release_missed_ns": 10,
                     "release_realtime_refused": True}
    summary = acksummary.AckSummary()
    summary.add_host("h", [read])
    [(_, _, folded)] = ackjournal.entries(summary.wire().records)  # what run.json gets
    assert folded == entry


def test_a_components_ack_is_read_as_what_a_component_may_say():
    assert k.ComponentAck.__struct_fields__ == ("status", "message", "traceback", "files", "published",
                                                "started", "ended")
    # Each goes on to the controller in the daemon's ack.
    assert set(k.ComponentAck.__struct_fields__) < set(k.Ack.__struct_fields__)
    with pytest.raises(msgspec.ValidationError, match=r"at `\$\.started`"):
        msgspec.convert({"status": "ok", "started": "soon"}, k.ComponentAck)


def test_a_stream_of_setup_defaults_to_what_the_writer_does_and_goes_on_the_wire_as_the_map_it_was():
    from netspec.datastream.format import DEFAULT_CHUNK_RECORDS, DEFAULT_FLUSH_MS
    from netspec.datastream.writer import StreamConfig
    assert (k.STREAM_CHUNK_RECORDS, k.STREAM_FLUSH_MS) == (DEFAULT_CHUNK_RECORDS, DEFAULT_FLUSH_MS)
    config = StreamConfig("s", enable=("A",), ring_chunks=4, trigger=("A/x",), components=("c",))
    assert StreamConfig.from_wire("s", config.spec()) == config == StreamConfig.from_map("s", config.wire())
    assert on_the_wire(config.spec()) == {"enable": ["A"], "disable": [], "ring_chunks": 4,
                                          "trigger": ["A/x"], "chunk_records": 4096, "flush_ms": 100,
                                          "components": ["c"]}
