"""What a failed step says of each host (controller/engine/failures.py)."""

import asyncio

from netspec.controller.engine.barrier import Barrier
from netspec.controller.engine.failures import step_failures
from netspec.controller.experiment.model import Step
from netspec.controller.record.results import ComponentResult
from netspec.protocol.errors import DeadlineExceeded, RemoteError
from netspec.protocol.kinds import Ack


def test_a_collect_whose_files_the_deadline_caught_fails_each_host_for_its_files_not_a_component():
    async def failures():
        barrier = Barrier(3, Step("collect"), {"a": ["one"], "b": ["two"]})
        for host, name in (("a", "one"), ("b", "two")):
            barrier.add(host, name, Ack(status="ok", step=3, component=name, entered=0, acked=0))
        assert barrier.opened.done()
        # As Steps.step says it once the barrier is open: each host waited for for its files.
        missed = DeadlineExceeded("collect", {"a": ["files"], "b": ["files"]}, 60)
        results = {"one": ComponentResult("a", "one", ["x"]), "two": ComponentResult("b", "two", ["x"])}
        return step_failures(barrier, missed, results, {})
    outcome = asyncio.run(failures())
    assert set(outcome) == {"a", "b"}
    assert all(isinstance(e, RemoteError) for e in outcome.values()), outcome
    assert str(outcome["a"]) == ("host a: DeadlineExceeded: its files were not all fetched within "
                                 "the deadline of 60 s"), str(outcome["a"])
