import asyncio

import pytest
from netspec.controller.engine.barrier import Barrier, NeedOutOfReach
from netspec.controller.experiment.model import Step
from netspec.protocol.kinds import Ack

OK, ERROR = (Ack(status=status, step=0, component="c", entered=0, acked=0) for status in ("ok", "error"))


def make(need=None):
    return Barrier(3, Step("work", need=need), {"a": ["x", "y"], "b": ["z"]})


def test_the_barrier_opens_when_every_participant_acked():
    async def scenario():
        barrier = make()
        assert barrier.add("a", "x", OK) and barrier.add("b", "z", OK)
        assert not barrier.opened.done() and barrier.waiting() == {"a": ["y"]}
        assert not barrier.host_done("a") and barrier.host_done("b")
        assert barrier.add("a", "y", OK)
        assert barrier.opened.done() and barrier.waiting() == {}
    asyncio.run(scenario())


def test_one_error_fails_a_step_that_needs_everyone():
    async def scenario():
        assert not make().add("a", "x", ERROR)
    asyncio.run(scenario())


def test_k_of_n_tolerates_failures_until_k_is_out_of_reach():
    async def scenario():
        barrier = make(need=2)
        assert barrier.add("a", "x", ERROR)          # 2 of the other 2 can still ack
        assert barrier.add("b", "z", OK)
        assert not barrier.opened.done()
        assert barrier.add("a", "y", OK)
        assert barrier.opened.done()
        again = make(need=2)
        assert again.add("a", "x", ERROR)
        assert not again.add("a", "y", ERROR)        # only 1 left: 2 is out of reach
    asyncio.run(scenario())


def test_a_duplicate_or_unexpected_ack_changes_nothing():
    async def scenario():
        barrier = make()
        assert barrier.add("a", "x", OK) and barrier.add("a", "x", ERROR)
        assert barrier.add("c", "q", ERROR)
        assert barrier.good == 1 and barrier.bad == 0
    asyncio.run(scenario())


def test_a_step_with_no_participants_is_open_at_once():
    async def scenario():
        assert Barrier(0, Step("start_logging"), {}).opened.done()
    asyncio.run(scenario())


def test_a_need_above_the_participants_is_refused_naming_the_step_before_any_ack():
    async def scenario():
        with pytest.raises(NeedOutOfReach) as caught:
            make(need=4)
        assert str(caught.value) == ("phase 'work' needs 4 participants to ack (need: 4), but it has only 3: "
                                     "it could never get through")
    asyncio.run(scenario())


def test_a_need_put_out_of_reach_by_those_who_left_fails_the_step_and_blames_no_ok_ack():
    async def scenario():
        barrier = make(need=3)
        assert barrier.add("a", "x", OK)
        barrier.drop("b", "z")  # ended in an earlier step
        assert barrier.opened.done() and isinstance(barrier.opened.exception(), NeedOutOfReach)
        assert "but it has only 2 (1 left the run earlier)" in str(barrier.opened.exception())
        assert barrier.add("a", "y", OK)  # an ok ack is never the cause
    asyncio.run(scenario())
