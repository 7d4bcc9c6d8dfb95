"""The fork server's lifetime: `close` (or leaving its `async with`) ends it and its reader."""

import asyncio
import os

from netspec.controller.hosts.forks import DaemonForks


def test_leaving_the_fork_servers_with_ends_its_process_and_the_task_that_reads_it(tmp_path):
    async def scenario():
        async with DaemonForks() as forks:
            pid = await forks.spawn(["--listen", "127.0.0.1:0", "--announce", "--root", str(tmp_path / "d"),
                                     "--parent-pid", str(os.getpid())], tmp_path / "d.log")
            await asyncio.wait_for(forks.port(pid), 20)
            reader, server = forks._reader, forks.proc
            assert reader is not None and not reader.done()
            await forks.terminate(pid)
        left = asyncio.all_tasks() - {asyncio.current_task()}
        return reader, server, left
    reader, server, left = asyncio.run(scenario())
    assert reader.done() and not reader.cancelled() and reader.exception() is None
    assert server.returncode is not None
    assert left == set()
