"""A relay's batch of one step's acks (daemon/relay.py): which acks it folds into a summary,
which go up as themselves, and when it leaves."""

import asyncio

import msgspec
import pytest
from netspec.daemon.relay import BATCH_WAIT_S, Batch, Relay
from netspec.protocol import ackjournal, acksummary
from netspec.protocol import kinds as k
from netspec.protocol import messages as m
from netspec.protocol.acksummary import AckSummary
from netspec.protocol.kinds import Ack
from support import on_the_wire


def _ack(component, status=m.ACK_OK, **more):
    return msgspec.convert({"t": m.ACK, "step": 3, "component": component, "status": status, "entered": 100,
                            "acked": 150, "entry_clock": [10, 5], **more}, Ack)


def _batch(expected, own, sent, compress=False):
    """A batch whose events are kept as the maps they are on the wire."""
    return Batch(3, expected, lambda event: sent.append(on_the_wire(event)), "a", own,
                 summarize=True, compress=compress)


@pytest.mark.parametrize("to_controller", [False, True])
def test_a_hosts_plain_acks_are_folded_once_its_last_one_is_in_with_a_childs_summary(to_controller,
                                                                                    monkeypatch):
    monkeypatch.setattr(acksummary, "COMPRESS_FROM", 0)  # these few records deflated too

    async def scenario():
        sent = []
        batch = _batch(expected=4, own=2, sent=sent, compress=to_controller)
        child = AckSummary()
        child.add_host("b", [_ack("y", acked=900), _ack("z")])
        batch.add_own(_ack("x"))
        batch.add_summary(child.wire())
        assert not sent  # one of a's acks is still out
        batch.add_own(_ack("w"))
        return sent
    [batch] = asyncio.run(scenario())
    summary = batch["summary"]
    assert batch["acks"] == [] and (summary["acks"], summary["hosts"]) == (4, 2)
    assert summary["slowest"] == [[800, "b"], [50, "a"]]
    # The batch a first-level host sends the controller has its records deflated; a child's
    # batch to its relay has them as they are, for the relay to join.
    assert summary.get("zlib", False) is to_controller
    assert sorted((h, c) for h, c, _ in ackjournal.entries(summary["records"], to_controller)) == [
        ("a", "w"), ("a", "x"), ("b", "y"), ("b", "z")]


def test_a_host_with_one_meaningful_ack_sends_all_of_its_acks_as_themselves():
    async def scenario():
        sent = []
        batch = _batch(expected=3, own=3, sent=sent)
        batch.add_own(_ack("x"))
        batch.add_own(_ack("y", m.ACK_WARNING, message="slow disk"))
        batch.add_own(_ack("z"))  # plain, but its host's acks go up as themselves now
        return sent
    [batch] = asyncio.run(scenario())
    assert "summary" not in batch and [(a["host"], a["component"]) for a in batch["acks"]] == [
        ("a", "x"), ("a", "y"), ("a", "z")]


def test_an_error_leaves_at_once_and_a_late_hosts_held_acks_go_up_as_themselves():
    async def scenario():
        sent = []
        batch = _batch(expected=3, own=2, sent=sent)
        batch.add_own(_ack("x"))
        batch.add([_ack("e", m.ACK_ERROR, message="boom", host="c")])
        error = list(sent)
        # Not a wait for something to happen: the window in which the timer a's first ack
        # set would have fired, had the error's batch not cancelled it; nothing may leave in it.
        await asyncio.sleep(BATCH_WAIT_S * 3)
        return error, sent
    error, sent = asyncio.run(scenario())
    # The error went at once, with a's ack held so far: a's other ack is late, so none is folded.
    assert [[(a["host"], a["component"]) for a in b["acks"]] for b in error] == [[("c", "e"), ("a", "x")]]
    assert len(sent) == 1 and "summary" not in sent[0]


def test_an_ack_that_comes_once_the_relay_closed_goes_up_at_once_and_leaves_no_timer():
    async def scenario():
        sent = []
        relay = Relay("a", sent.append)
        _, emit = relay.enter(k.Enter(phase="work", step=3, hosts={"a": 0},
                                      lists=[[k.Participant(name="one"), k.Participant(name="two")]]),
                              sent.append)
        await relay.close()
        emit(_ack("one"))
        loop = asyncio.get_running_loop()
        return sent, [h for h in loop._scheduled if not h.cancelled()]  # no public view of its timers
    sent, timers = asyncio.run(scenario())
    assert [[a.component for a in s.acks] for s in sent] == [["one"]] and timers == []
