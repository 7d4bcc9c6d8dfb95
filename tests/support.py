"""Helpers the tests share: waiting on conditions, the CLI, finding a run's processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from netspec import camp
from netspec.daemon.sampler import CampConfig, CampSampler
from netspec.datastream.instrument import Datastreams
from netspec.datastream.writer import StreamConfig, StreamInfo
from netspec.protocol.runrecord import read_run

PROGRAMS = Path(__file__).parent / "programs"
# The test session's directory, shared by its xdist workers (made in conftest.py).
SESSION_ENV = "NETSPEC_TEST_SESSION"


def session_dir() -> Path:
    return Path(os.environ[SESSION_ENV])


def session_run_id(name: str) -> str:
    """A run id of this test session's own: a run's processes are found (and killed) by
    their run id machine-wide, so another suite's run of the same test is never touched."""
    return f"{name}-{session_dir().name.removeprefix('netspec-tests-')}"


REPO = Path(__file__).parent.parent


def wait_for(condition: Callable[[], object], timeout: float = 20.0, what: str = "") -> object:
    """Wait until `condition()` is truthy, or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout} s waiting for {what or condition}")


def descriptors() -> dict[int, str]:
    """This process's open descriptors and what each is open on (a file, socket:[...],
    pipe:[...], anon_inode:[timerfd]): what a closed owner must have given back."""
    held = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            held[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the listing's own descriptor, closed since
            continue
    return held


def threads_named(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def remove_named(client: Any, prefix: str) -> None:
    """Every container and network of a Docker engine (a `docker` client) whose name has
    `prefix`, removed: what a test made in it."""
    for container in client.containers.list(all=True, filters={"name": prefix}):
        container.remove(force=True)
    for network in client.networks.list(filters={"name": prefix}):
        network.remove()


def ns_control(*args: str, cwd: Path, timeout: float = 120,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netspec.controller.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env or os.environ.copy())


def start_run(path: Path, cwd: Path, until: Callable[[dict], object],
              what: str, *options: str, timeout: float = 20.0) -> tuple[subprocess.Popen, dict]:
    """Start `ns_control run [OPTIONS] FILE` in `cwd`; return the process and the run's record
    (its journal merged) once `until(record)` holds."""
    proc = subprocess.Popen([sys.executable, "-m", "netspec.controller.cli", "run", *options, str(path)],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def reached() -> dict | None:
        latest = cwd / "runs" / "latest"
        record = load_record(latest) if (latest / "run.json").exists() else {}
        return record if record and until(record) else None
    return proc, wait_for(reached, timeout=timeout, what=what)  # type: ignore[return-value]


def latest_record(runs: Path) -> dict:
    return json.loads((runs / "latest" / "run.json").read_text())


def write_stream(directory: Path, host: str, component: str, records: list[tuple[str, int, int]]) -> None:
    """A real stream file of `component` on `host` with the records (entity name in group KV,
    ts, tag), written in time order."""
    ds = Datastreams()
    entities = {name: ds.event("KV", name) for name in {r[0] for r in records}}
    ds.start([StreamConfig("kv", enable=("KV",), chunk_records=500)],
             StreamInfo(directory, run="r", host=host, component=component), exit_hooks=False)
    for name, ts, tag in sorted(records, key=lambda r: r[1]):
        ds.streams[0].put((entities[name].id, ts, tag))
    ds.stop()


def start_loadgen(*args: str) -> subprocess.Popen:
    """tests/programs/loadgen.py in a mode, once it says it is in place (stdin and stdout
    piped, text)."""
    proc = subprocess.Popen([sys.executable, str(PROGRAMS / "loadgen.py"), *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def sample_a_process_that_exits(streams: Datastreams, after: int) -> tuple[CampSampler, int]:
    """A CAMP sampler of component "load" (a real process) into `streams`: one sample while
    it runs, then `after` once it has exited. The sampler, and the process's pid."""
    load = start_loadgen("percent", "0")
    sampler = CampSampler(streams, CampConfig(interfaces=("lo",), disks=()), {"load": load.pid})
    sampler.sample()
    load.kill()
    load.wait()
    for _ in range(after):
        sampler.sample()
    return sampler, load.pid



def schedstat(pid: int) -> tuple[int, int]:
    """The process's time on a CPU, and its time runnable in a run queue, waiting for one,
    summed over its threads: the scheduler's own account, in ns."""
    ran = waited = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with open(task / "schedstat") as f:
            r, w, _ = map(int, f.read().split())
        ran, waited = ran + r, waited + w
    return ran, waited


def schedstat_ns(pid: int) -> int:
    """The process's time on a CPU (all its threads)."""
    return schedstat(pid)[0]


class Steal:
    """The share of one CPU the hypervisor took from this machine while the block ran (and
    the time, ns, summed over its CPUs): time a guest cannot see, in which its busy loops
    stand still and its processes stay runnable."""

    def __enter__(self) -> Steal:
        self.share, self.stolen_ns = 0.0, 0
        self._stolen, self._t0 = camp.cpu_times().steal, time.monotonic_ns()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stolen_ns = camp.cpu_times().steal - self._stolen
        self.share = self.stolen_ns / (time.monotonic_ns() - self._t0)


def load_record(run: Path) -> dict:
    """run.json of `run` (its journals folded) as plain JSON values, read through the typed
    record's one door (`read_run`), so that a test may compare it with what it expects."""
    return msgspec.to_builtins(read_run(run))


def on_the_wire(message: msgspec.Struct) -> dict[str, Any]:
    """The map `message` is on the wire, as a peer before typed messages decodes it."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(message))
