"""The demo, run once per test session, whichever xdist worker asks first: for the tests that
each check one thing about it (tests/e2e/test_engine.py) and for the manual's examples, which
read its result set (tests/docs/test_examples.py)."""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import REPO, latest_record, ns_control, session_dir

DEMO = REPO / "experiments" / "stimulus_response" / "stimulus_response.yaml"


@dataclass(frozen=True)
class Demo:
    where: Path
    run: Path
    record: dict
    stdout: str
    env: dict

    @property
    def merged(self) -> Path:
        return self.run / "merged"


@pytest.fixture(scope="session")
def demo() -> Demo:
    """The demo, run once per test session for the tests that each check one thing about
    it: the first xdist worker to need it runs it, the others wait for it and read it."""
    where = session_dir() / "demo"
    env = {**os.environ, "NETSPEC_HOME": str(where / "home")}
    with open(session_dir() / "demo.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (where / "stdout").exists():
            where.mkdir(exist_ok=True)
            done = ns_control("run", str(DEMO), cwd=where, env=env)
            assert done.returncode == 0, done.stderr
            (where / "stdout").write_text(done.stdout)
    stdout = (where / "stdout").read_text()
    return Demo(where, where / "runs" / "latest", latest_record(where / "runs"), stdout, env)
