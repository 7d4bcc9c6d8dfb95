import asyncio

from netspec.controller.barrier import Barrier
from netspec.controller.model import Step

OK, ERROR = {"status": "ok"}, {"status": "error"}


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
