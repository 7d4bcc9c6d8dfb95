"""The stragglers' watches: a task group of their own, ended when the run ends."""

import asyncio

from netspec.controller.engine.barrier import Barrier
from netspec.controller.engine.stragglers import Stragglers
from netspec.controller.experiment.model import Step
from netspec.protocol.kinds import Ack
from netspec.protocol.runrecord import RUN_FORMAT, RunRecord
from netspec.protocol.runstep import Step as StepRecord
from netspec.protocol.runstep import StepHost

OK = Ack(status="ok", step=0, component="x", entered=0, acked=0)


def test_a_watch_still_ending_a_straggler_when_the_run_ends_is_cancelled_at_the_timeout_and_leaves_no_task():
    async def scenario():
        loop = asyncio.get_running_loop()
        record = RunRecord(format=RUN_FORMAT, id="r", experiment="e", status="running",
                           steps=[StepRecord("work", "running", hosts={"a": StepHost(components={})})])
        asked = asyncio.Event()

        async def end(host, name):  # as a daemon that never answers the request to end it
            asked.set()
            await loop.create_future()

        said = []
        async with Stragglers(record, said.append, lambda: None, end) as stragglers:
            barrier = Barrier(0, Step("work", need=1, deadline_s=0.05), {"a": ["x", "y"]})
            assert barrier.add("a", "x", OK) and barrier.opened.done()  # 1 of 2: y is a straggler
            stragglers.follow(barrier, loop.time() + 0.05, lambda: None)
            await asyncio.wait_for(asked.wait(), 10)  # its deadline passed: y is being ended
            started = loop.time()
            await stragglers.run_ended(0.2)
            took = loop.time() - started
            left = asyncio.all_tasks() - {asyncio.current_task()}
        return took, left, record, stragglers.troubles
    took, left, record, troubles = asyncio.run(scenario())
    assert left == set()  # the watch was cancelled, not left to run on after the run's end
    assert 0.2 <= took < 5
    assert record.steps[0].hosts["a"].components["y"].outcome == "killed"
    assert troubles == ["phase 'work', host a: y: no ack within the deadline of 0.05 s: ended"]
