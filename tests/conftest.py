"""Shared fixtures: an isolated NETSPEC_HOME, real daemons, experiment files, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from netspec.nodelib.auth import load_or_create_key
from support import PROGRAMS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A VM's hypervisor can stand a CPU still for milliseconds at any moment (/proc/stat's
    # steal); a bound on real time then fails for the machine, not for the code. Such tests
    # run again, and fail when they fail three times; the report lists each rerun.
    for item in items:
        if item.get_closest_marker("timing"):
            item.add_marker(pytest.mark.flaky(reruns=2, reruns_delay=1))


@pytest.fixture(autouse=True)
def netspec_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("NETSPEC_HOME", str(home))
    monkeypatch.delenv("NETSPEC_KEY_FILE", raising=False)
    return home


@pytest.fixture
def key(netspec_home: Path) -> bytes:
    return load_or_create_key()


class DaemonProcess:
    def __init__(self, proc: subprocess.Popen[str], port: int):
        self.proc, self.port = proc, port

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


@pytest.fixture
def daemon(key: bytes, tmp_path: Path) -> Iterator[DaemonProcess]:
    """A real netspecd on a free loopback port."""
    proc = subprocess.Popen([sys.executable, "-m", "netspec.daemon.main", "--listen",
                             "127.0.0.1:0", "--announce", "--root", str(tmp_path / "droot")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = json.loads(proc.stdout.readline())["port"]
    yield DaemonProcess(proc, port)
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture
def experiment(tmp_path: Path) -> Callable[[str], Path]:
    """Write an experiment file; ACTOR in the text names the misbehaving test program."""
    def write(text: str, name: str = "exp.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).replace("ACTOR", str(PROGRAMS / "actor.py")))
        return path
    return write




@pytest.fixture(scope="session")
def nethosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list]:
    """Three real hosts in network namespaces, each with its own address and sshd."""
    import nethosts as nh
    reason = nh.why_unavailable()
    if reason:
        pytest.skip(reason)
    state = tmp_path_factory.mktemp("nethosts")
    hosts = nh.up(3, state)
    yield hosts
    nh.down(state)


@pytest.fixture
def ssh_env(nethosts: list, monkeypatch: pytest.MonkeyPatch,
            tmp_path_factory: pytest.TempPathFactory) -> list:
    """The namespaced hosts as ssh aliases netspec-h1.., for this process and ns_control."""
    monkeypatch.setenv("NETSPEC_SSH_CONFIG", str(nethosts[0].state / "ssh_config"))
    monkeypatch.setenv("NETSPEC_CACHE", str(tmp_path_factory.getbasetemp() / "netspec-cache"))
    for host in nethosts:
        if not host.sshd_answers():
            host.start_sshd()  # a test took it down
    return nethosts
