"""Nothing a daemon sends is taken unchecked: every event's and reply's shape where it is read
(protocol/kinds.py, protocol/events.py, protocol/reading.py). The controller's reading of them
over a real connection is tests/controller/hosts/test_fleet_events.py's."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from netspec.protocol import events, reading
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.errors import ProtocolError
from netspec.protocol.wire import packed

ACK = {"t": m.ACK, "step": 2, "component": "c", "status": m.ACK_OK, "entered": 1, "acked": 2}
# What msgpack can carry: the values a daemon could put in an event.
WIRE = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats()
                    | st.text(max_size=8) | st.binary(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4), max_leaves=12)
FIELDS = st.sampled_from(sorted({*k.Ack.__struct_fields__, *k.Exit.__struct_fields__, "t", "stream", "data",
                                 "error", "acks", "host", "summary",
                                 *(f for r in k.REPLIES.values() for f in r.__struct_fields__)}))


def _read(event):
    """An event as the controller reads it off the wire: typed, or refused naming the field."""
    return events.FROM_DAEMON(packed(event))


def _refused(event) -> str:
    read = _read(event)
    assert type(read) is reading.Refused, read
    return read.problem


def test_each_kind_of_event_is_taken_only_with_its_fields_of_their_types():
    assert _read(ACK) == k.Ack(step=2, component="c", status=m.ACK_OK, entered=1, acked=2)
    assert _read({**ACK, "entry_clock": [5, 6], "phases": ["a"], "published": {"k": 1}}).entry_clock == (5, 6)
    assert _refused({**ACK, "status": "fine"}) == ("event 'ack' does not fit: Invalid enum value 'fine' - "
                                                   "at `$.status`")
    assert _refused({**ACK, "step": -1}) == "event 'ack' does not fit: Expected `int` >= 0 - at `$.step`"
    assert _refused({**ACK, "entered": "1"}) == ("event 'ack' does not fit: Expected `int`, got `str` - "
                                                 "at `$.entered`")
    assert _refused({"t": m.ACK, "step": 0}) == ("event 'ack' does not fit: Object missing required field "
                                                 "`status`")
    assert type(_read({"t": m.OUTPUT, "component": "c", "stream": "stdout", "data": b"x"})) is k.Output
    for stream in ("../../etc/passwd", "stdin", b"stdout"):
        assert "at `$.stream`" in _refused({"t": m.OUTPUT, "component": "c", "stream": stream, "data": b"x"})
    assert type(_read({"t": m.EXIT, "component": "c", "returncode": 0, "duration_s": 0.5, "argv": ["x"],
                       "ended_ns": 1, "failed": False})) is k.Exit
    assert _refused({"t": m.EXIT, "component": "c"}) == ("event 'exit' does not fit: Object missing required "
                                                         "field `returncode`")
    assert _refused({"t": m.ERROR, "error": "boom"}) == ("event 'error' does not fit: Expected `object`, got "
                                                         "`str` - at `$.error`")
    assert _read({"t": m.ACKS, "step": 2, "acks": [{**ACK, "host": "h"}]}).acks[0].host == "h"
    assert _refused({"t": m.ACKS, "step": 2, "acks": [["h"]]}) == ("event 'acks' does not fit: Expected "
                                                                   "`object`, got `array` - at `$.acks[0]`")
    assert _refused({"t": "lost", "error": "x"}) == "unknown event type 'lost'"
    with pytest.raises(ProtocolError, match="not a message map with a string 't'"):
        _read({"t": 5})


@settings(max_examples=400, deadline=None, derandomize=True)
@given(kind=st.sampled_from([m.ACK, m.ACKS, m.OUTPUT, m.EXIT, m.ERROR, m.REPLY, "x"]),
       fields=st.dictionaries(FIELDS, WIRE, max_size=8))
def test_no_event_from_the_wire_breaks_the_reading_and_what_it_takes_has_its_shape(kind, fields):
    read = _read({**fields, "t": kind})  # never raises: a map with a text "t" is typed or refused
    if type(read) is k.Output:
        assert read.stream in ("stdout", "stderr") and isinstance(read.data, bytes)
    if type(read) in (k.Ack, k.Acks):
        for ack in [read] if type(read) is k.Ack else read.acks:
            assert type(ack.step) is int and ack.step >= 0 and isinstance(ack.component, str)
    if type(read) is reading.Refused:
        assert read.problem.startswith((f"event {kind!r} does not fit: ", "unknown event type"))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(kind=st.sampled_from(sorted(k.REPLIES)), size=st.integers(0, 1 << 23),
       fields=st.dictionaries(FIELDS, WIRE, max_size=8))
def test_no_reply_from_the_wire_breaks_the_reading_and_a_read_it_takes_makes_progress(kind, size, fields):
    frame = _read({**fields, "t": m.REPLY, "id": 1})
    if type(frame) is not k.ReplyFrame:
        return
    try:
        reply = reading.reply(kind, frame)  # raises nothing else
    except ProtocolError:
        return
    if kind == m.READ and events.read_problem(size, reply) is None:
        assert len(reply.data) <= size and (reply.data or reply.eof is True)


def test_a_clock_estimate_that_is_not_one_is_refused_where_it_is_read_naming_the_field():
    good = {"offset_ns": -61, "bound_ns": 812, "exchanges": 21, "source": "kernel"}
    assert _read({**ACK, "clock": good}).clock == k.Clock(-61, 812, 21, "kernel")
    for bad, field in (({**good, "offset_ns": "soon"}, "Expected `int`, got `str` - at `$.clock.offset_ns`"),
                       ({**good, "source": None}, "Expected `str`, got `None` - at `$.clock.source`"),
                       ([1, 2, 3, 4], "Expected `object | null`, got `array` - at `$.clock`")):
        said = _refused({**ACK, "step": 0, "component": m.NODE, "clock": bad})
        assert said == f"event 'ack' does not fit: {field}"


def test_an_error_whose_fields_are_of_the_wrong_type_is_refused_where_it_is_read_naming_the_field():
    error = {"type": "OSError", "message": "disk full", "traceback": "...", "host": "a", "phase": "work"}
    assert _read({"t": m.ERROR, "error": error, "id": 3}) == k.ErrorEvent(error=k.WireError(**error), id=3)
    assert _read({"t": m.ERROR, "error": {}}).error == k.WireError()
    for field, value in (("type", 5), ("message", ["x"]), ("traceback", b"x"), ("host", 1), ("phase", {})):
        assert f"at `$.error.{field}`" in _refused({"t": m.ERROR, "error": {**error, field: value}})
