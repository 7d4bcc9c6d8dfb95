"""A Docker engine as netspec's container hosts use it (controller/hosts/docker.py): a
client of it, the run's network removed once empty, a lifeline held through it hung up
(`hang_up`), and a run's directory in a container copied out through it
(`ContainerRunFiles`, what a salvage and `collect` read)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import re
import socket
import threading
from collections.abc import Callable
from typing import IO, Any, TypeVar

from netspec.protocol.errors import ConnectionLost, NetspecError

from .runfiles import ArchiveRunFiles

API_TIMEOUT_S = 60
# Calls in flight to one fleet's engines at once, and each engine client's HTTP pool (the
# SDK's default is 10). dockerd takes a container's create, start and removal a few at a
# time (its network sandbox and layer store serialise them): more than this queue in the
# engine rather than here, and cost threads. Measured on this 2-core machine (bench/containers.py).
ENGINE_CALLS = 8
CLOSE_S = 5.0  # at the end, how long the engine calls under way are waited for
TLS_API_VERSION = "1.40"  # Docker 19.03 and later: every call made here is in it
CREATED_LABEL = "org.netspec.created"
MEMORY = re.compile(r"^([0-9]+)([bkmg]?)$", re.IGNORECASE)


def engine_client(engine: str | None, tls: dict[str, str] | None = None, pool: int | None = None) -> Any:
    """A client of the engine at `engine` (None: DOCKER_HOST, else this machine's socket),
    keeping `pool` connections to it (None: the SDK's default).

    Raises:
        ConnectionLost: the engine does not answer.
    """
    import docker
    import docker.errors

    sized = {} if pool is None else {"max_pool_size": pool}
    try:
        if engine is None:
            client = docker.from_env(timeout=API_TIMEOUT_S, **sized)
        else:
            config = None
            if tls:
                config = docker.tls.TLSConfig(
                    client_cert=(tls["cert"], tls["key"]) if "cert" in tls else None,
                    ca_cert=tls.get("ca"), verify=tls.get("ca") or True)
            # With a CA of the file's, the API version is given rather than asked at once:
            # requests takes REQUESTS_CA_BUNDLE over the client's CA unless the client ignores
            # the environment, which it can be told only once made.
            client = docker.DockerClient(base_url=engine, tls=config or False, timeout=API_TIMEOUT_S,
                                         use_ssh_client=False, version=TLS_API_VERSION if config else None,
                                         **sized)
            if config is not None:
                client.api.trust_env = False
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        raise ConnectionLost(f"engine {engine or 'local'}",
                             detail=f"the Docker engine does not answer: {exc}") from None
    return client


def memory_bytes(text: str | int | None) -> int | None:
    if text is None:
        return None
    found = MEMORY.match(str(text).strip())
    if not found:
        raise NetspecError(f"memory: {text!r} is no size (a number of bytes, or with k, m or g)")
    return int(found[1]) * 1024 ** "bkmg".index((found[2] or "b").lower())


def remove_network(client: Any, name: str) -> None:
    """Remove the run's network once no container is on it (each host tries after its own
    container went: the last one's try finds it empty)."""
    import docker.errors

    try:
        network = client.networks.get(name)
        ours = (network.attrs.get("Labels") or {}).get(CREATED_LABEL) == "1"
        if ours and not network.attrs.get("Containers"):
            network.remove()
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code not in (403, 409):  # another container joined it since: its host removes it
            raise


def hang_up(lifeline: Any) -> None:
    """End a lifeline: a shutdown of the socket under it, which reaches the engine at once (a
    close alone may not, while the SDK's response holds the same socket)."""
    raw = getattr(lifeline, "_sock", lifeline)
    with contextlib.suppress(OSError):
        raw.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        lifeline.close()


T = TypeVar("T")


class Engines:
    """The Docker engines of one fleet's container hosts, shared by them: one client of each
    engine (made once; its pool as large as the calls in flight), what each engine said of
    itself, the images looked up, the run's networks (made once, removed after the last of
    their containers left), and one pool of ENGINE_CALLS threads where every call to them is
    made, so N containers come up and go at once, a bounded number in flight. Owned by the
    Fleet (engine/reach.py), closed at the run's end (engine/finish.py)."""

    def __init__(self, calls: int = ENGINE_CALLS):
        self.calls = calls
        self._pool = concurrent.futures.ThreadPoolExecutor(calls, thread_name_prefix="netspec-engine")
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}  # one per engine: its client and networks made once
        self._clients: dict[str, Any] = {}
        self._info: dict[str, dict[str, Any]] = {}
        self._images: dict[tuple[str, str], Any] = {}
        self._networks: dict[tuple[str, str], list[Any]] = {}  # network, containers of ours on it
        self._futures: set[concurrent.futures.Future[Any]] = set()
        self.closed = False

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in the pool. Cancelled, the call runs on to its end (each is bounded by
        the client's API_TIMEOUT_S); `close` waits for it, under its deadline."""
        return await asyncio.wrap_future(self.submit(fn, *args))

    def submit(self, fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
        """`fn(*args)` put in the pool: its future, for a caller that must know how it ended
        even after its own wait was cancelled."""
        if self.closed:
            raise NetspecError("the fleet's engines are closed")
        future = self._pool.submit(fn, *args)
        self._futures.add(future)
        future.add_done_callback(self._futures.discard)
        return future

    def _engine_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(key, threading.Lock())

    def client(self, engine: str | None, tls: dict[str, str] | None) -> Any:
        key = engine or ""
        with self._engine_lock(key):
            if key not in self._clients:
                self._clients[key] = engine_client(engine, tls, pool=self.calls)
            return self._clients[key]

    def info(self, engine: str | None, tls: dict[str, str] | None) -> dict[str, Any]:
        key = engine or ""
        client = self.client(engine, tls)
        with self._engine_lock(key):
            if key not in self._info:
                self._info[key] = client.info()
            return self._info[key]

    def image(self, engine: str | None, tls: dict[str, str] | None, name: str) -> Any:
        """The image `name` of the engine (docker.errors.ImageNotFound if it has none)."""
        client = self.client(engine, tls)
        with self._engine_lock(engine or ""):
            if (engine or "", name) not in self._images:
                self._images[engine or "", name] = client.images.get(name)
            return self._images[engine or "", name]

    def network(self, engine: str | None, tls: dict[str, str] | None, name: str,
                labels: dict[str, str]) -> Any:
        """The run's network `name`, made by the first of its containers (the engine would make
        two of one name if asked at once), counted as joined by one more of ours. Made under a
        lock of the daemon's (its ID), not of its address alone: two addresses of one daemon
        (ssh:// and tcp:// to it) asking at once made two networks of one name, its check of
        duplicates being no lock."""
        import docker.errors

        client = self.client(engine, tls)
        daemon = self.info(engine, tls).get("ID") or engine or ""
        with self._engine_lock(engine or ""), self._engine_lock(f"daemon {daemon}"):
            held = self._networks.get((engine or "", name))
            if held is None:
                try:
                    network = client.networks.get(name)
                except docker.errors.NotFound:
                    network = self._create_network(client, name, labels)
                held = self._networks[engine or "", name] = [network, 0]
            held[1] += 1
            return held[0]

    @staticmethod
    def _create_network(client: Any, name: str, labels: dict[str, str]) -> Any:
        """Make the run's network; one of its name made meanwhile (two engine addresses of one
        daemon, the local socket and ssh:// to it, each made it at once) is taken if it is
        this run's (its labels), else refused."""
        import docker.errors

        try:
            return client.networks.create(name, driver="bridge", check_duplicate=True, labels=labels)
        except docker.errors.APIError as exc:
            if exc.status_code != 409:
                raise
            network = client.networks.get(name)
            theirs = network.attrs.get("Labels") or {}
            if any(theirs.get(key) != value for key, value in labels.items()):
                raise
            return network

    def left(self, engine: str | None, tls: dict[str, str] | None, name: str) -> None:
        """One of ours left the network `name`: the last one's leaving removes it (if netspec made it)."""
        with self._engine_lock(engine or ""):
            held = self._networks.get((engine or "", name))
            if held is None:
                return
            held[1] -= 1
            if held[1] > 0:
                return
            del self._networks[engine or "", name]
        remove_network(self.client(engine, tls), name)

    def close(self, seconds: float) -> list[str]:
        """The pool ended: calls not begun dropped, those under way waited for up to `seconds`,
        then the clients closed. What is still under way then is said (its thread ends with
        its call, by the client's timeout)."""
        self.closed = True
        running = [f for f in list(self._futures) if not f.cancel()]
        _, late = concurrent.futures.wait(running, timeout=seconds)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        return [f"{len(late)} calls to the Docker engine still under way after {seconds:g} s at the "
                "run's end (each ends by its own timeout)"] if late else []


class ContainerRunFiles(ArchiveRunFiles):
    """A run's directory in a container, copied out through its engine (get_archive: the
    container may have stopped). The whole directory comes in one archive, kept in a
    temporary file until `remove` or the object's end."""

    def __init__(self, container: Any, root: str, engine: str, owned: bool):
        super().__init__(root, f"{engine}, container {container.name}")
        self.container, self.owned = container, owned

    def _fetch(self, into: IO[bytes]) -> bool:
        import docker.errors

        try:
            stream, _ = self.container.get_archive(self.root)
            for chunk in stream:
                into.write(chunk)
        except docker.errors.NotFound:
            return False
        except docker.errors.DockerException as exc:
            raise NetspecError(f"{self.root} not copied out of {self.where}: {exc}") from None
        return True

    def remove(self) -> None:
        """The run's directory removed: with the container, if netspec made it for the run
        (and keeps it not), else from the running container."""
        import docker.errors

        self._drop()
        try:
            if self.owned:
                network = list(self.container.attrs["NetworkSettings"]["Networks"])
                self.container.remove(force=True)
                for name in network:
                    remove_network(self.container.client, name)
                return
            self.container.reload()
            if self.container.status == "running":
                code, out = self.container.exec_run(["rm", "-rf", "--", self.root])
                if code:
                    said = out.decode(errors="replace").strip()
                    raise NetspecError(f"could not remove {self.root}: {said}")
        except docker.errors.NotFound:
            return
        except docker.errors.DockerException as exc:
            raise NetspecError(f"could not remove {self.root}: {exc}") from None
