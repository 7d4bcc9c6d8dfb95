"""Shared fixtures: an isolated NETSPEC_HOME, real daemons, experiment files, namespaced
hosts named for this test session, and the machine shared between xdist workers."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

# The browser tests' runs, made once per session (tests/browser.py). Declared here: a
# conftest.py of tests/web would be the module `conftest` that other tests import from.
from browser import faults_results, fleet_results, results  # noqa: F401
from demorun import demo  # noqa: F401
from netns import veth_netns  # noqa: F401
from netspec.protocol.auth import load_or_create_key
from support import PROGRAMS, SESSION_ENV, session_dir

SESSION_PREFIX = "netspec-tests-"
HOST_FIXTURES = {"nethosts", "ssh_env", "own_host"}
# The end-to-end tier: every test under it is marked e2e here, whatever its file says, so
# that `make test-quick` (-m "not e2e") leaves out the whole folder.
E2E = Path(__file__).parent / "e2e"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "timing: measures real time against a bound; runs with the "
                                       "machine to itself (no other test of this session beside it)")
    config.addinivalue_line("markers", "nethosts: uses namespaced hosts with sshd (root)")
    # The session's directory: the xdist controller makes it before its workers start, and
    # they find it in the environment they inherit.
    if not hasattr(config, "workerinput") and SESSION_ENV not in os.environ:
        _remove_dead_sessions()
        session = tempfile.mkdtemp(prefix=SESSION_PREFIX)
        (Path(session) / "owner").write_text(str(os.getpid()))
        os.environ[SESSION_ENV] = session
        config.stash[_OWN_SESSION] = Path(session)


def _remove_dead_sessions() -> None:
    """Session directories whose suite was killed before it could remove them."""
    import nethosts as nh

    if nh.why_unavailable() is None:
        nh.reap()  # first: their processes may still write into the session directory
    for path in Path(tempfile.gettempdir()).glob(f"{SESSION_PREFIX}*"):
        try:
            owner = int((path / "owner").read_text())
        except (OSError, ValueError):
            continue  # no owner written yet, or not ours to judge
        if not nh.owner_alive(owner):
            shutil.rmtree(path, ignore_errors=True)


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_OWN_SESSION, None)
    if session is not None:
        shutil.rmtree(session, ignore_errors=True)
        os.environ.pop(SESSION_ENV, None)


_OWN_SESSION = pytest.StashKey[Path]()
# Own hosts take indexes no other host of the session had: a removed host's address and
# host key stay in caches (ARP, known_hosts) for a while.
_own_indexes = itertools.count(10)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HOST_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.nethosts)
        if item.path.is_relative_to(E2E):
            item.add_marker(pytest.mark.e2e)
    # The timing tests first and together, so that one worker runs them one after the other
    # with the machine held alone throughout (below), rather than waiting for the other
    # worker's test to end before each; those on namespaced hosts first of all, so that the
    # hosts are set up before the machine is held.
    items.sort(key=lambda item: (not _timing(item), item.get_closest_marker("nethosts") is None))


@contextlib.contextmanager
def machine_share(exclusive: bool) -> Iterator[None]:
    """A readers-writer lock over this session's workers: a `timing` test measures real time,
    so it runs alone; every other test shares the machine. A turnstile taken before either
    lock keeps a waiting timing test from being starved by a stream of shared ones."""
    with open(session_dir() / "turnstile", "a") as turnstile, open(session_dir() / "machine", "a") as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(machine, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)


def _timing(item: pytest.Item) -> bool:
    return item.get_closest_marker("timing") is not None


# The machine, held alone from a timing test's call until the last of the timing tests
# that follow it on this worker is torn down (the next item is not one, or there is none).
_alone: list[contextlib.ExitStack] = []  # one while it is held


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if _timing(item):
        return (yield)  # each phase takes its own share (below)
    with machine_share(exclusive=False):
        return (yield)


# A timing test shares the machine while it sets up (which may be long: the namespaced
# hosts' install) unless it follows another on this worker, and has it alone from its call.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    shared = _timing(item) and not _holding()
    with machine_share(exclusive=False) if shared else contextlib.nullcontext():
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    if _timing(item) and not _holding():
        held = contextlib.ExitStack()
        held.enter_context(machine_share(exclusive=True))
        _alone.append(held)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    shared = _timing(item) and not _holding()  # its setup failed: it never had the machine
    try:
        with machine_share(exclusive=False) if shared else contextlib.nullcontext():
            return (yield)
    finally:
        if _holding() and (nextitem is None or not _timing(nextitem)):
            _alone.pop().close()


def _holding() -> bool:
    return bool(_alone)


def _wheel_cache() -> Path:
    """Wheels for remote hosts are built once per session, shared by its workers."""
    return session_dir() / "cache"


@pytest.fixture(autouse=True)
def netspec_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("NETSPEC_HOME", str(home))
    monkeypatch.delenv("NETSPEC_KEY_FILE", raising=False)
    monkeypatch.setenv("NETSPEC_CACHE", str(_wheel_cache()))
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
def nethosts() -> Iterator[list]:
    """Three real hosts in network namespaces, each with its own address and sshd, named
    for this worker of this session (two suites on one machine each have their own),
    removed at the end; if this process dies unseen, the next set built on the machine
    removes them. The session's sets share one home, so netspec is installed there once."""
    import nethosts as nh
    reason = nh.why_unavailable()
    if reason:
        pytest.skip(reason)
    prefix = nh.random_prefix()
    hosts = nh.up(3, prefix, session_dir() / f"hosts-{prefix}", owner=os.getpid(),
                  home=session_dir() / "home")
    try:
        _install_netspec(hosts[0])
        yield hosts
    finally:
        nh.down(prefix, hosts[0].state)


def _install_netspec(host: Any) -> None:
    """What the first run over SSH would do: build this netspec's wheels and install them in
    the hosts' home (once per session: the hosts share it), here in set-up rather than in a
    test whose time counts."""
    from netspec.controller.experiment.model import Host
    from netspec.controller.hosts.remote import SSHHost

    env = {"NETSPEC_SSH_CONFIG": str(host.set.ssh_config), "NETSPEC_CACHE": str(_wheel_cache()),
           "NETSPEC_HOME": str(session_dir() / "install-home")}
    with mock.patch.dict(os.environ, env):
        remote = SSHHost(Host("install", ssh=host.alias))
        try:
            remote.prepare()
        finally:
            remote.conn.close()


@pytest.fixture(scope="session")
def docker_image() -> Iterator[str]:
    """netspec's image of this build in this machine's Docker engine, made once (its base
    from this machine's Debian packages, netspec from this session's wheels) and kept: the
    engine caches it by its content's hash, so later sessions of the same source find it.
    Skips only on a machine without Docker's engine installed; an engine installed that does
    not answer fails the tests that need it (start dockerd: .ci/run does)."""
    import docker
    from netspec.controller.hosts.engines import engine_client
    from netspec.controller.hosts.images import build
    from netspec.protocol.errors import ConnectionLost

    try:
        client = engine_client(None)
    except ConnectionLost as exc:
        if shutil.which("dockerd") is None:
            pytest.skip(f"Docker's engine is not installed here: {exc}")
        raise AssertionError(f"dockerd is installed but no engine answers (start it): {exc}") from exc
    try:
        with mock.patch.dict(os.environ, {"NETSPEC_CACHE": str(_wheel_cache())}):
            tag = build(client, lambda said: print(f"docker_image: {said}"))
    except docker.errors.DockerException as exc:
        raise AssertionError(f"building netspec's image failed: {exc}") from exc
    finally:
        client.close()
    yield tag


@pytest.fixture(scope="session")
def k8s_cluster(docker_image: str) -> Iterator[Path]:
    """A real two-node Kubernetes of this worker's own (tests/k8stestbed.py: its binaries
    built once per version into the machine's cache, which .ci/run fills first; its nodes
    PREFIX-node and PREFIX-node2, a kubelet and a containerd each), netspec's image put in
    each node's runtime; its kubeconfig. Every part of it is named for the worker and removed
    after. Skips only where Go or containerd cannot be had, or as non-root."""
    import secrets

    import k8stestbed

    if os.geteuid() != 0:
        pytest.skip("a Kubernetes testbed needs root (its node's interfaces, containerd, mounts)")
    for tool, package in (("go", "Go"), ("containerd", "containerd")):
        if shutil.which(tool) is None:
            pytest.skip(f"{package} is not installed here: the Kubernetes testbed is built and run with it")
    testbed = k8stestbed.Testbed("k" + secrets.token_hex(3), nodes=2)
    try:
        try:
            k8stestbed.up(testbed)
            k8stestbed.import_image(testbed, docker_image)
        except SystemExit as exc:
            raise AssertionError(f"the Kubernetes testbed did not come up: {exc}") from None
        yield testbed.kubeconfig
    finally:
        left = k8stestbed.down(testbed)
    assert not left, f"the Kubernetes testbed was not all removed: {left}"  # after a clean end alone


@pytest.fixture
def ssh_env(nethosts: list, monkeypatch: pytest.MonkeyPatch) -> list:
    """The session's namespaced hosts as ssh aliases netspec-h1.., for this process and
    ns_control; each checked with a real SSH session before it is handed out. Tests leave
    them as they found them: a test that breaks a host takes an `own_host`."""
    monkeypatch.setenv("NETSPEC_SSH_CONFIG", str(nethosts[0].set.ssh_config))
    for host in nethosts:
        if not host.sshd_answers():
            raise AssertionError(f"{host.alias} ({host.address}): the shared host's sshd serves no "
                                 f"SSH session; an earlier test broke it")
    return nethosts


@pytest.fixture
def own_host(ssh_env: list, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator:
    """One more host on the session's bridge for this test alone (alias netspec-h<n>, in an
    ssh_config of its own added to NETSPEC_SSH_CONFIG), removed after: for tests that stop
    its sshd or kill everything on it."""
    import nethosts as nh
    host = ssh_env[0].set.host(next(_own_indexes))
    nh.add(host)
    try:
        config = tmp_path / "own_ssh_config"
        config.write_text(host.ssh_config_entry(host.dir / "known_hosts"))
        monkeypatch.setenv("NETSPEC_SSH_CONFIG", os.pathsep.join([str(host.set.ssh_config), str(config)]))
        nh.start_and_check(host)
        yield host
    finally:
        nh.remove(host)
