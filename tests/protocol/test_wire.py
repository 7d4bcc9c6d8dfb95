import msgpack
import pytest
from netspec.protocol.errors import ProtocolError
from netspec.protocol.wire import (
    HEADER,
    MAX_FRAME,
    MAX_OBJECTS,
    TAG_BYTES,
    WALK_FROM,
    FrameDecoder,
    Seal,
    count_objects,
    encode,
    packed,
)

MESSAGES = [{"t": "hello", "id": 1}, {"t": "output", "data": b"\x00" * 300, "n": -5},
            {"t": "x", "nested": {"a": [1, 2.5, "s", None, True]}}]


def test_a_stream_split_at_every_byte_offset_decodes_the_same_messages():
    stream = b"".join(encode(msg) for msg in MESSAGES)
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder()
        got = decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])
        assert got == MESSAGES, cut
        assert decoder.pending == 0


def test_a_stream_fed_one_byte_at_a_time_decodes():
    decoder = FrameDecoder()
    got = [msg for byte in b"".join(map(encode, MESSAGES)) for msg in decoder.feed(bytes([byte]))]
    assert got == MESSAGES


def test_a_value_packed_beforehand_makes_the_frame_its_value_would():
    hosts = {f"h{i}": [{"name": "netspecd", "params": {"n": i, "b": b"x"}}] for i in range(40)}
    for size in (1, 15, 16, 17):  # the map's header: fixmap up to 15 keys, map16 beyond
        fields = {"t": "enter", **{f"k{i}": i for i in range(size - 2)}}
        with_value = {**fields, "hosts": hosts}
        assert encode({**fields, "hosts": packed(hosts)}) == encode(with_value)
        seal, again = Seal(b"k" * 32, b"c"), Seal(b"k" * 32, b"c")
        assert encode({**fields, "hosts": packed(hosts)}, seal) == encode(with_value, again)
        assert FrameDecoder().feed(encode({**fields, "hosts": packed(hosts)})) == [with_value]


def test_an_oversized_frame_is_refused_from_its_header_alone():
    decoder = FrameDecoder(max_frame=1000)
    with pytest.raises(ProtocolError, match="1001 bytes exceeds the 1000-byte limit"):
        decoder.feed(HEADER.pack(1001))


def test_a_frame_at_the_limit_is_accepted():
    body = msgpack.packb({"t": "x", "pad": b"a" * 100})
    decoder = FrameDecoder(max_frame=len(body))
    assert decoder.feed(HEADER.pack(len(body)) + body) == [{"t": "x", "pad": b"a" * 100}]


@pytest.mark.parametrize("body", [b"\xc1", msgpack.packb([1, 2]), msgpack.packb({"id": 1}),
                                  msgpack.packb({"t": 5})])
def test_a_body_that_is_not_a_message_map_is_a_protocol_error(body):
    with pytest.raises(ProtocolError):
        FrameDecoder().feed(HEADER.pack(len(body)) + body)


def test_encoding_a_message_over_the_limit_fails():
    with pytest.raises(ProtocolError, match="exceeds"):
        encode({"t": "x", "data": b"a" * (MAX_FRAME + 1)})


def _sealed(messages, key=b"k" * 32, direction=b"a->b"):
    seal = Seal(key, direction)
    return [encode(msg, seal) for msg in messages]


def _opened(frames, key=b"k" * 32, direction=b"a->b"):
    decoder = FrameDecoder()
    decoder.seal = Seal(key, direction)
    return decoder.feed(b"".join(frames))


def test_sealed_frames_decode_in_order_with_the_same_key_and_direction():
    assert _opened(_sealed(MESSAGES)) == MESSAGES


@pytest.mark.parametrize("attack", ["replayed", "reordered", "dropped", "injected", "flipped",
                                    "other direction", "other key"])
def test_a_sealed_stream_refuses_injection_replay_reordering_and_damage(attack):
    frames = _sealed(MESSAGES)
    key, direction = b"k" * 32, b"a->b"
    if attack == "replayed":
        frames = [frames[0], frames[0]]
    elif attack == "reordered":
        frames = [frames[1], frames[0]]
    elif attack == "dropped":
        frames = [frames[0], frames[2]]
    elif attack == "injected":
        frames = [frames[0], encode({"t": "reset", "clean": True}) + b"\0" * TAG_BYTES, frames[1]]
    elif attack == "flipped":
        frames = [frames[0][:-1] + bytes([frames[0][-1] ^ 1])]
    elif attack == "other direction":
        direction = b"b->a"
    else:
        key = b"j" * 32
    with pytest.raises(ProtocolError, match="MAC check"):
        _opened(frames, key, direction)


def _many_empty_arrays(size: int) -> bytes:
    """A message map whose `pad` is an array of empty arrays, `size` bytes in all."""
    head = msgpack.packb({"t": "hello", "id": 1})
    count = size - len(head) - len(b"\xa3pad") - 5
    return bytes([head[0] + 1]) + head[1:] + b"\xa3pad" + b"\xdd" + count.to_bytes(4, "big") + b"\x90" * count


def test_a_frame_of_millions_of_empty_arrays_is_refused_before_any_is_built():
    body = _many_empty_arrays(int(3.8 * 1024 * 1024))  # the frame of issue 38, item 8
    assert msgpack.unpackb(body)["t"] == "hello"  # well-formed: only its size is wrong
    with pytest.raises(ProtocolError, match=f"more than {MAX_OBJECTS} objects"):
        FrameDecoder().feed(HEADER.pack(len(body)) + body)


def test_a_frame_at_the_object_budget_decodes():
    body = msgpack.packb({"t": "x", "pad": [[]] * (MAX_OBJECTS - 5)})
    assert len(body) > WALK_FROM
    assert count_objects(body, MAX_OBJECTS) == MAX_OBJECTS
    assert len(FrameDecoder().feed(HEADER.pack(len(body)) + body)[0]["pad"]) == MAX_OBJECTS - 5


@pytest.mark.parametrize("value", [
    None, True, -1, 127, 255, -129, 70000, -(1 << 40), 1 << 63, 1.5, "", "s" * 31, "s" * 300,
    "s" * 70000, b"", b"b" * 300, b"b" * 70000, [], [1] * 20, [1] * 70000, {"a": {"b": [None]}},
    {str(i): i for i in range(70000)}, msgpack.ExtType(1, b"x" * 300), msgpack.ExtType(2, b"1234"),
])
def test_the_walk_counts_every_object_msgpack_builds(value):
    def objects(v):
        if isinstance(v, dict):
            return 1 + sum(objects(k) + objects(x) for k, x in v.items())
        if isinstance(v, list):
            return 1 + sum(map(objects, v))
        return 1
    assert count_objects(msgpack.packb(value), 1 << 20) == objects(value)


@pytest.mark.parametrize("body", [
    b"\xdd\xff\xff\xff\xff" + b"\x90" * 100,  # an array claiming 4 billion items
    b"\xdf\x00\x01\x00\x00" + b"\x90" * 100,  # a map claiming 65536 pairs in 100 bytes
    b"\xdb\xff\xff\xff\xff" + b"s" * 100,     # a string claiming 4 GiB
    b"\x92\x01",                              # an array cut short
    b"\x91\xc1",                              # the byte msgpack never uses
])
def test_a_length_past_the_end_of_the_body_is_refused_by_the_walk(body):
    with pytest.raises(ProtocolError):
        count_objects(body, MAX_OBJECTS)


def test_a_decoder_asked_for_one_message_keeps_the_rest_undecoded_for_later():
    stream = b"".join(encode(msg) for msg in MESSAGES)
    decoder = FrameDecoder()
    assert decoder.feed(stream, most=1) == MESSAGES[:1]
    assert decoder.pending == len(stream) - len(encode(MESSAGES[0]))
    assert decoder.feed(b"", most=0) == []
    assert decoder.feed(b"") == MESSAGES[1:]
