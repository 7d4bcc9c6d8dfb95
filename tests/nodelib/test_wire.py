import msgpack
import pytest
from netspec.protocol.errors import ProtocolError
from netspec.protocol.wire import HEADER, MAX_FRAME, TAG_BYTES, FrameDecoder, Seal, encode, packed

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
