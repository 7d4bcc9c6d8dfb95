"""A host in a container of a Docker engine (`docker:` in the experiment file), through the
Docker SDK for Python (the controller's dependency alone: the daemon never imports it).

Created for the run (the default): one container per host, named `<prefix>-<run>-<host>`
and labelled with the run and host, on the run's own network `<prefix>-<run>` (made by the
first of its hosts, removed by the last), with the limits and capabilities asked; its main
process is netspecd, so a container killed is a daemon lost. A key of its own for the run
(never the long-term key) is copied in before it starts (put_archive); netspecd removes the
file as it reads it and hides its memory from the programs it runs. At the run's end the
container goes, and the network with its last container (both kept with --keep-daemons).
The controller holds the container's stdin, netspecd's lifeline: if the controller dies,
the engine closes it, and the daemon ends its run and the container (whose files
`ns_control collect` then copies out).

Attached (`container:` a name, or `label:` key=value matching one container): netspecd is
started in the container (exec) beside what runs there, its stdin the exec's, held by the
controller as its lifeline; the container joins the run's network, and both are undone at
the run's end.

Either way the daemon's run directories are under WORK in the container, which a salvage
or `collect` copies out through the engine (get_archive), running or stopped. The engine is
this machine's (DOCKER_HOST, else its socket) or `engine:` ssh://user@host (over paramiko)
or tcp://host:port (with TLS: `tls:` ca, cert, key). A container of this machine's engine
is reached at its address on the run's network; one of a remote engine through its
daemon's port published on the engine's machine.

Another engine's provider is another Host beside this one, with its own RunFiles: a pod per
host, controller/hosts/pods.py. The engine sees only Host.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import io
import json
import os
import tarfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from netspec.camp.cgroup import CONTAINER_ENV
from netspec.protocol.auth import new_run_key
from netspec.protocol.errors import ConnectionLost, NetspecError
from netspec.protocol.hostfacts import HostFacts
from netspec.protocol.names import safe_name
from netspec.protocol.runrecord import Limits, Placement

from ..experiment.model import Host as HostSpec
from ..experiment.model import engine_url
from .engines import (
    API_TIMEOUT_S,
    CREATED_LABEL,
    ContainerRunFiles,
    Engines,
    hang_up,
    memory_bytes,
)
from .fleet import Host
from .images import NETSPECD_LABEL, default_image
from .leftovers import CONTROLLER_LABEL, HOST_LABEL, KEPT_LABEL, RUN_LABEL, controller_id
from .runfiles import add_file, programs_archive

DAEMON_ADDRESS_ENV = "NETSPEC_DAEMON_ADDRESS"  # daemon/facts.py: the address its components are told
PORT = 7420  # netspecd's in the container: each has its own network namespace
WORK = "/var/lib/netspec/work"
PROGRAMS = "/var/lib/netspec/programs"
KEY_DIR = "/etc/netspec"
START_S = 30.0
POLL_S = 0.05
POLL_MAX_S = 0.5  # netspecd's announce is looked for ever less often: N containers' polls are calls in flight


class DockerHost(Host):
    """A host with `docker:` in the experiment file."""

    start_deadline_s = START_S + API_TIMEOUT_S

    def __init__(self, spec: HostSpec, run_id: str, engines: Engines, keep: bool = False,
                 share: bool = False):
        super().__init__(spec)
        assert spec.docker is not None
        self.docker = spec.docker
        self.run_id, self.keep, self.share = run_id, keep, share
        # Its daemon's key, this host's for this run alone: the long-term key never goes to
        # a container, which the program under test shares (docs/explanations/security.md).
        self.run_key = new_run_key()
        self.engines = engines  # the fleet's, or collect's: every call to the engine goes through them
        self.container: Any = None
        self.created = False
        self.joined = False  # an attached container joined the run's network
        self.networked = False  # counted on the run's network (by `Engines.network`)
        self.lifeline: Any = None  # netspecd's stdin, attached: a made container's (`_make`), an exec's
        self.log_dir: Path | None = None
        self.address = ""
        self.engine_info: dict[str, Any] = {}
        self.making: concurrent.futures.Future[None] | None = None  # `_make` in the fleet's pool

    @property
    def prefix(self) -> str:
        return self.docker.prefix

    @property
    def network_name(self) -> str:
        return self.docker.network or f"{self.prefix}-{self.run_id}"

    @property
    def container_name(self) -> str:
        return f"{self.prefix}-{self.run_id}-{safe_name(self.name, 'host')}"

    @property
    def remote(self) -> bool:
        """An engine of another machine (its containers' addresses are not routed here)."""
        return not self.engine_url.startswith("unix://")

    @property
    def engine_url(self) -> str:
        return engine_url(self.docker.engine)

    def _client(self) -> Any:
        return self.engines.client(self.docker.engine, self.docker.tls)

    async def start(self, log_dir: Path) -> tuple[str, int]:
        """Every call to the engine made in the fleet's pool (`Engines`): N hosts' starts go on
        at once, a bounded number of calls in flight; waiting for netspecd's announce holds
        no thread."""
        import docker.errors

        engines = self.engines
        try:
            if self.docker.container or self.docker.label:
                port = await engines.call(self._start_attached)
            else:
                self.making = engines.submit(self._make)
                await asyncio.wrap_future(self.making)
                port = await self._announced(log_dir)
            await engines.call(self.container.reload)
        except docker.errors.DockerException as exc:
            raise ConnectionLost(self.name, detail=f"engine {self.docker.engine or 'local'}: {exc}") from None
        networks = self.container.attrs["NetworkSettings"]["Networks"]
        net = networks.get(self.network_name) or next(iter(networks.values()), {})
        self.address = net.get("IPAddress", "")
        if self.remote:
            published = self.container.attrs["NetworkSettings"]["Ports"].get(f"{PORT}/tcp") or []
            if not published:
                raise ConnectionLost(self.name, detail=f"the engine published no port for netspecd's {PORT}")
            return urlsplit(self.engine_url).hostname or "", int(published[0]["HostPort"])
        if not self.address:
            raise ConnectionLost(self.name, detail=f"container {self.container.name} has no address")
        return self.address, port

    def _image(self) -> tuple[str, str]:
        """The image to run and netspecd's path in it (the label of images netspec built)."""
        import docker.errors

        image = self.docker.image or default_image(self.docker.packages)
        try:
            found = self.engines.image(self.docker.engine, self.docker.tls, image)
        except docker.errors.ImageNotFound:
            where = f" --engine {self.docker.engine}" if self.docker.engine else ""
            where += "".join(f" --package {p}" for p in self.docker.packages)
            raise ConnectionLost(self.name, detail=f"no image {image} in {self.engine_label}: make it "
                                 f"with `ns_control image build{where}`") from None
        return image, (found.labels or {}).get(NETSPECD_LABEL, "netspecd")

    def _network(self) -> Any:
        """The run's network (made by the first of its hosts), this host counted on it."""
        network = self.engines.network(self.docker.engine, self.docker.tls, self.network_name,
                                          labels={RUN_LABEL: self.run_id, CREATED_LABEL: "1"})
        self.networked = True
        return network

    def _make(self) -> None:
        """The container made and started, the key in it, its lifeline held."""
        self.engine_info = self.engines.info(self.docker.engine, self.docker.tls)
        self.container = self._create()
        self.created = True
        self._put_key()
        if not self.keep:
            self.lifeline = self.container.attach_socket(params={"stdin": 1, "stream": 1})
        self.container.start()

    def _create(self) -> Any:
        image, netspecd = self._image()
        self._network()
        d = self.docker
        # Its stdin the lifeline, as an SSH host's daemon's is its channel: held by this
        # controller (attached), closed by the engine when the controller goes, which ends the
        # daemon's run and the container. A daemon kept (--keep-daemons) has none.
        return self._client().containers.create(
            image, [*self._netspecd(netspecd), "--announce", *([] if self.keep else ["--lifeline"])],
            stdin_open=not self.keep, detach=self.keep,  # not detached: StdinOnce, as `docker run -i` makes
            name=self.container_name, hostname=self.name, network=self.network_name, init=True,
            environment={DAEMON_ADDRESS_ENV: "hostname", CONTAINER_ENV: "1"},
            labels={RUN_LABEL: self.run_id, HOST_LABEL: self.name, CREATED_LABEL: "1",
                    CONTROLLER_LABEL: controller_id(os.getpid()), **({KEPT_LABEL: "1"} if self.keep else {})},
            nano_cpus=int(d.cpus * 1e9) if d.cpus else None, mem_limit=memory_bytes(d.memory),
            cap_add=list(d.cap_add), ports={f"{PORT}/tcp": None} if self.remote else None)

    def _netspecd(self, path: str, port: int = PORT) -> list[str]:
        """netspecd's command line: it takes the key for the run from its file and removes
        it (`--run-key`), and sets up no other run."""
        return [path, "--listen", f"0.0.0.0:{port}", "--run-key", self._key_path(), "--only-run", self.run_id,
                "--root", WORK]

    def _refuse_in_use(self) -> None:
        """Refuse an attached container whose netspecd serves another run (the engine's
        process list of it: each run's is `--only-run RUN`), unless the run shares hosts and
        the container is this machine's (a remote engine's is reached at its published
        PORT, which the other netspecd holds).

        Raises:
            ConnectionLost: it does, naming that run and its netspecd's pid.
        """
        if self.share and not self.remote:
            return
        top = self.container.top(ps_args="-eo pid,args")
        for pid, args in (row[:2] for row in top.get("Processes") or []):
            words = args.split()
            if "--only-run" in words[:-1] and (other := words[words.index("--only-run") + 1]) != self.run_id:
                how = (f"a remote engine's container is reached at its published port {PORT}, which that "
                       "netspecd holds: not shared" if self.share else
                       "a run shares a host only when asked to (ns_control run --share-hosts)")
                raise ConnectionLost(self.name, detail=(
                    f"container {self.container.name} is in use by run {other!r} (its netspecd, pid {pid} "
                    f"on the engine's machine); {how}"))

    def _key_path(self) -> str:
        return f"{KEY_DIR}/{self.run_id}-{safe_name(self.name, 'host')}.key"

    def _put_key(self) -> None:
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            for path in (KEY_DIR, PROGRAMS):
                info = tarfile.TarInfo(path.strip("/"))
                info.type, info.mode = tarfile.DIRTYPE, 0o700
                tar.addfile(info)
            add_file(tar, self._key_path().strip("/"), (self.run_key.hex() + "\n").encode(), 0o600)
        self.container.put_archive("/", data.getvalue())

    async def _announced(self, log_dir: Path) -> int:
        """The port netspecd announced on its stdout, looked for in the container's log ever
        less often (each look a call in the fleet's pool, none held between looks), until
        START_S or the container's end."""
        self.log_dir = log_dir
        loop = asyncio.get_running_loop()
        deadline, wait = loop.time() + START_S, POLL_S
        while True:
            port, status = await self.engines.call(self._look)
            if port is not None:
                return port
            if status not in ("created", "running") or loop.time() > deadline:
                said = await self.engines.call(self._said)
                log_dir.mkdir(parents=True, exist_ok=True)
                (log_dir / "netspecd.log").write_text(said)
                raise ConnectionLost(self.name, detail=f"netspecd did not start in container "
                                     f"{self.container.name} ({status}) within {START_S:g} s; "
                                     f"it said:\n{said[-2000:]}")
            await asyncio.sleep(wait)
            wait = min(wait * 1.5, POLL_MAX_S)

    def _look(self) -> tuple[int | None, str]:
        """netspecd's announced port if its log has it, else None and the container's status."""
        logs = self.container.logs(stdout=True, stderr=False).decode(errors="replace")
        for line in logs.splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                return int(json.loads(line)["port"]), "running"
        self.container.reload()
        return None, self.container.status

    def _said(self) -> str:
        return self.container.logs(stdout=False, stderr=True).decode(errors="replace")

    def _find(self) -> Any:
        client = self._client()
        if self.docker.container:
            return client.containers.get(self.docker.container)
        found = client.containers.list(filters={"label": self.docker.label})
        if len(found) != 1:
            raise ConnectionLost(self.name, detail=f"label {self.docker.label} matches {len(found)} running "
                                 "containers, not one")
        return found[0]

    def _start_attached(self) -> int:
        """netspecd started in the container, which joins the run's network (left at the end)
        so that the run's hosts reach each other."""
        self.engine_info = self.engines.info(self.docker.engine, self.docker.tls)
        self.container = self._find()
        self._refuse_in_use()
        self._put_key()
        if self.network_name not in self.container.attrs["NetworkSettings"]["Networks"]:
            self._network().connect(self.container)
            self.joined = True
        state = f"/tmp/netspecd-{self.run_id}-{safe_name(self.name, 'host')}.json"
        netspecd = (self.container.image.labels or {}).get(NETSPECD_LABEL, "netspecd")
        self.container.reload()
        address = self.container.attrs["NetworkSettings"]["Networks"][self.network_name]["IPAddress"]
        # Its stdin the lifeline, as a made container's is: the exec's, attached here (stdin
        # alone: nothing reads its output), which the engine closes when this controller
        # closes it or dies, and netspecd ends its run. One kept (--keep-daemons) has none.
        api = self._client().api
        # A port of its own (0: the kernel's choice, read back from its state file), so that a
        # run sharing the container binds beside another's netspecd; a remote engine's, PORT,
        # the one the container publishes.
        port = PORT if self.remote else 0
        command = [*self._netspecd(netspecd, port), "--state-file", state,
                   *([] if self.keep else ["--lifeline"])]
        started = api.exec_create(self.container.id, command, stdin=not self.keep, stdout=False, stderr=False,
                                  environment={DAEMON_ADDRESS_ENV: address, CONTAINER_ENV: "1"})
        if self.keep:
            api.exec_start(started["Id"], detach=True)
        else:
            self.lifeline = api.exec_start(started["Id"], socket=True)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            code, out = self.container.exec_run(["cat", state])
            if code == 0:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    return int(json.loads(out)["port"])
            time.sleep(POLL_S)
        raise ConnectionLost(self.name, detail=f"netspecd did not start in container {self.container.name} "
                             f"within {START_S:g} s")

    def reachable_at(self, facts: HostFacts) -> str:
        """Its address on the run's network of its engine. A container of another engine
        reaches it there where the engines' machines route to each other's networks (a
        container of a remote engine reaches one of this machine's, the clock reference
        say, through the remote machine's route); the other way round only its daemon's
        port is published."""
        return self.address

    async def place(self, programs: list[str]) -> dict[str, str]:
        """Each program copied into the container (PROGRAMS/<digest>/<name>), in one archive."""
        if not programs:
            return {}
        data, placed = programs_archive(programs, PROGRAMS)
        await self.engines.call(self.container.put_archive, PROGRAMS, data)
        return placed

    def placement(self) -> Placement | None:
        if self.container is None:
            return None
        attrs, info = self.container.attrs, self.engine_info
        host_config = attrs.get("HostConfig", {})
        version = int(info.get("CgroupVersion") or 1)
        if info.get("CgroupDriver") == "systemd":
            cgroup = f"/system.slice/docker-{self.container.id}.scope"
        else:
            cgroup = f"{host_config.get('CgroupParent') or '/docker'}/{self.container.id}"
        nano = host_config.get("NanoCpus") or 0
        return Placement(
            engine=self.docker.engine or "local", node=info.get("Name", ""), engine_id=info.get("ID", ""),
            container_id=self.container.id, container=self.container.name, created=self.created,
            image=attrs.get("Config", {}).get("Image", ""), image_id=attrs.get("Image", ""),
            network=self.network_name if self.created else ",".join(attrs["NetworkSettings"]["Networks"]),
            limits=Limits(cpus=nano / 1e9 if nano else None, memory_bytes=host_config.get("Memory") or None,
                          cap_add=list(host_config.get("CapAdd") or [])),
            cgroup=cgroup, cgroup_version=version)

    def run_files(self, run_id: str) -> ContainerRunFiles | None:
        import docker.errors

        client = self._client()
        try:
            container = self.container
            if container is None:
                container = (self._find() if self.docker.container or self.docker.label else
                             client.containers.get(f"{self.prefix}-{run_id}-{safe_name(self.name, 'host')}"))
            container.reload()
        except docker.errors.NotFound:
            raise NetspecError(f"no container of host {self.name} in engine {self.docker.engine or 'local'} "
                               "(removed already?)") from None
        if container.status == "running":
            container.exec_run([_netspecd(container), "--kill-run", run_id, "--host", self.name])
            if (container.labels or {}).get(CREATED_LABEL) != "1":
                # An attached container's netspecd removed its key as it read it; one whose
                # controller died before it did not.
                container.exec_run(["rm", "-f", "--", self._key_path()])
        return ContainerRunFiles(container, f"{WORK}/{safe_name(run_id, 'run id')}", self.engine_label,
                                 owned=(container.labels or {}).get(CREATED_LABEL) == "1" and not self.keep)

    @property
    def engine_label(self) -> str:
        return f"engine {self.docker.engine}" if self.docker.engine else "the local engine"

    async def stop(self, run_id: str = "") -> list[str]:
        """In the fleet's pool, as its start: N containers go at once, a bounded number of
        calls in flight."""
        if self.keep:
            return []
        return await self.engines.call(self._stop)

    def _stop(self) -> list[str]:
        """The container killed and removed (netspecd ended its run and its files were
        fetched: nothing is left to stop it for), or netspecd ended in an attached one;
        the run's network removed after the last of its containers."""
        import docker.errors

        said: list[str] = []
        if self.making is not None and not self.making.cancel():
            # A start cancelled (another host failed) while its container was being made: made
            # to its end first, so that what it made is removed here, not left behind.
            concurrent.futures.wait([self.making], timeout=API_TIMEOUT_S)
        if self.lifeline is not None:
            hang_up(self.lifeline)
            self.lifeline = None
        try:
            if self.container is None:  # none made (its creation failed)
                return said
            if self.created:
                if self.log_dir is not None:  # netspecd's stderr, as a local or SSH host's is kept
                    said_there = self.container.logs(stdout=False, stderr=True)
                    (self.log_dir / "netspecd.log").write_bytes(said_there)
                self.container.remove(force=True)  # a kill, then the removal
            else:
                # netspecd removed its key as it read it; one that never started did not.
                self.container.exec_run(["rm", "-f", "--", self._key_path()])
                if self.joined:
                    self._client().networks.get(self.network_name).disconnect(self.container)
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as exc:
            said.append(f"container {self.container.name}: not cleaned up: {exc}")
        finally:
            if self.networked:
                self.networked = False
                try:
                    self.engines.left(self.docker.engine, self.docker.tls, self.network_name)
                except docker.errors.DockerException as exc:
                    said.append(f"network {self.network_name}: not removed: {exc}")
        self.container = None if self.created else self.container
        return said


def _netspecd(container: Any) -> str:
    return (container.image.labels or {}).get(NETSPECD_LABEL, "netspecd")

