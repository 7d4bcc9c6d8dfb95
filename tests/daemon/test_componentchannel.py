"""The daemon's end of a component's channel over a real socketpair, a Channel at the
component's end: registration welcomed, each enter answered by its own ack (of what a
component may say only), every wait ended when the component breaks the protocol."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable
from typing import Any

import pytest
from netspec.daemon.componentchannel import ComponentChannel, ComponentExited
from netspec.protocol import messages as m
from netspec.protocol.channel import Channel
from netspec.protocol.wire import HEADER
from support import session_run_id

RUN = session_run_id("run-channel")


async def _outcome(waiting: Awaitable[Any]) -> Any:
    """What `waiting` returns, or the ComponentExited it raises (a task of a group that
    raised would end the group)."""
    try:
        return await waiting
    except ComponentExited as exc:
        return exc


async def _pair(claims: list | None = None) -> tuple[ComponentChannel, Channel]:
    ours, theirs = socket.socketpair()
    link = ComponentChannel("c", RUN, lambda *claim: (claims if claims is not None else []).append(claim))
    await link.open(ours)
    return link, await Channel.over(theirs, peer="daemon")


def test_a_registration_is_welcomed_and_each_enter_gets_its_own_ack_of_a_components_fields():
    async def scenario():
        link, component = await _pair()
        async with asyncio.timeout(10), asyncio.TaskGroup() as tg:
            tg.create_task(link.read())
            component.send({"t": m.REGISTER, "phases": ["run", "collect"]})
            welcome = await component.recv()
            phases = await link.registered
            first = tg.create_task(link.enter("run", {"x": 1}, {}))
            second = tg.create_task(link.enter("collect", {}, {}, logging={"streams": {}}))
            enters = [await component.recv(), await component.recv()]
            by_phase = {e["phase"]: e for e in enters}
            # Answered out of order: each ack reaches the enter of its id.
            component.send({"t": m.ACK, "id": by_phase["collect"]["id"], "status": "ok",
                            "files": ["/tmp/b"]})
            component.send({"t": m.ACK, "id": by_phase["run"]["id"], "status": "warning",
                            "message": "slow", "files": ["/tmp/a"], "entered": 5})
            acks = await first, await second
            await component.close()  # its end closes: the reader ends
        await link.close()
        return welcome, phases, by_phase, acks, link.handed_back

    welcome, phases, enters, (run_ack, collect_ack), handed_back = asyncio.run(scenario())
    assert welcome == {"t": m.WELCOME, "component": "c", "run": RUN}
    assert phases == ["run", "collect"]
    assert enters["run"]["params"] == {"x": 1} and enters["collect"]["logging"] == {"streams": {}}
    # `entered` is the daemon's to add: what the component said of it does not go on.
    assert run_ack == {"status": "warning", "message": "slow", "files": ["/tmp/a"]}
    assert collect_ack == {"status": "ok", "files": ["/tmp/b"]}
    assert sorted(handed_back) == ["/tmp/a", "/tmp/b"]


def test_an_ack_not_of_an_acks_form_becomes_an_error_ack_that_says_so():
    async def scenario():
        link, component = await _pair()
        async with asyncio.timeout(10), asyncio.TaskGroup() as tg:
            tg.create_task(link.read())
            entering = tg.create_task(link.enter("run", {}, {}))
            enter = await component.recv()
            component.send({"t": m.ACK, "id": enter["id"], "status": "fine", "files": ["/etc/x"]})
            ack = await entering
            await component.close()
        await link.close()
        return ack, link.handed_back

    ack, handed_back = asyncio.run(scenario())
    assert ack["status"] == m.ACK_ERROR and "the component sent an ack that does not fit" in ack["message"]
    assert handed_back == []  # nothing of a refused ack is taken


def test_a_broken_frame_ends_every_wait_on_the_component_at_once():
    async def scenario():
        link, component = await _pair()
        async with asyncio.timeout(10), asyncio.TaskGroup() as tg:
            reading = tg.create_task(link.read())
            entering = tg.create_task(_outcome(link.enter("run", {}, {})))
            await component.recv()
            assert component.transport is not None
            component.transport.write(HEADER.pack(1) + b"\xc1")  # a byte msgpack never uses
            await reading
            outcomes = await entering, await _outcome(link.registered)
            await component.close()
        return outcomes, link.channel is not None and link.channel.closing, link.pending

    (entered, registered), closed, pending = asyncio.run(scenario())
    for outcome in (entered, registered):
        assert isinstance(outcome, ComponentExited) and "broke the netspec protocol" in str(outcome)
    assert closed and pending == {}


def test_a_plain_command_has_no_channel_to_ask_to_stop_over_and_its_waits_end_by_fail():
    async def scenario():
        link = ComponentChannel("plain", RUN, lambda *claim: None)
        asked = link.ask_to_stop()
        link.fail(ComponentExited("exited with code 0"))
        with pytest.raises(ComponentExited, match="code 0"):
            await link.registered
        await link.close()  # nothing to close: no error
        return asked

    assert asyncio.run(scenario()) is False


def test_a_claim_of_a_role_is_handed_on_and_one_not_of_its_form_breaks_the_protocol():
    async def scenario():
        claims: list = []
        link, component = await _pair(claims)
        async with asyncio.timeout(10), asyncio.TaskGroup() as tg:
            reading = tg.create_task(link.read())
            component.send({"t": m.REGISTER, "phases": ["run"]})
            await link.registered
            component.send({"t": m.CLAIM, "role": "leader", "held": True, "at": 5})
            component.send({"t": m.CLAIM, "role": "leader", "held": False, "at": 7})
            component.send({"t": m.CLAIM, "role": "lead er", "held": True, "at": 9})
            waiting = tg.create_task(_outcome(link.enter("run", {}, {})))
            await reading
            outcome = await waiting
        await component.close()
        return claims, outcome

    claims, outcome = asyncio.run(scenario())
    assert claims == [("leader", True, 5), ("leader", False, 7)]
    assert isinstance(outcome, ComponentExited) and "a claim of a role, not of a claim's form" in str(outcome)
