"""Replies too big for a frame are refused out loud, never dropped."""

from netspec.daemon.server import Session
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.wire import MAX_FRAME, encode


class Recorder:
    """A channel that frames what it is given, as the real one does, and keeps it."""

    def __init__(self):
        self.sent = []

    def send(self, message):
        encode(message)  # raises ProtocolError above the frame limit
        self.sent.append(message)


def test_a_reply_over_the_frame_limit_becomes_an_error_reply_with_its_id():
    channel = Recorder()
    Session(daemon=None, channel=channel).emit(k.ReadReply(id=7, data=b"x" * (MAX_FRAME + 1), eof=False))
    (sent,) = channel.sent
    assert type(sent) is k.ErrorEvent and sent.id == 7
    assert "exceeds the 16777216-byte frame limit" in sent.error.message


def test_a_reply_goes_on_the_wire_as_the_map_the_daemon_sent_before_typed_replies():
    read = {"t": m.REPLY, "id": 7, "data": b"x", "eof": True}
    assert encode(k.ReadReply(id=7, data=b"x", eof=True)) == encode(read)
    assert encode(k.Reply(id=2)) == encode({"t": m.REPLY, "id": 2})
    entry = {"component": "c", "name": "stdout", "path": "/x", "missing": False, "size": 3}
    assert encode(k.FilesReply(id=3, files=[k.FileEntry(**entry)])) == encode(
        {"t": m.REPLY, "id": 3, "files": [entry]})
    exit = {"component": "c", "returncode": 0, "argv": ["x"], "duration_s": 0.5, "expected": False,
            "forced": False, "ended_ns": 1}
    # and after them, what the daemon added since: whether the schedule's fault ended it, and
    # the step it ended in
    assert encode(k.Exit(**exit, failed=False)) == encode({"t": m.EXIT, **exit, "failed": False,
                                                           "scheduled": False, "step": None})


def test_an_error_with_a_huge_message_still_fits_a_frame():
    error = m.error_map(ValueError("y" * (MAX_FRAME * 2)))
    assert len(encode({"t": m.ERROR, "id": 1, "error": error})) < 4 * m.ERROR_TEXT_LIMIT
    assert error["message"].startswith(f"[{MAX_FRAME * 2 - m.ERROR_TEXT_LIMIT} characters cut]...yyy")
