"""A host in a container of a Docker engine (`docker:` in the experiment file), through the
Docker SDK for Python (the controller's dependency alone: the daemon never imports it).

Created for the run (the default): one container per host, named `<prefix>-<run>-<host>`
and labelled with the run and host, on the run's own network `<prefix>-<run>` (made by the
first of its hosts, removed by the last), with the limits and capabilities asked; its main
process is netspecd, so a container killed is a daemon lost. The shared key is copied in
before it starts (put_archive). At the run's end the container goes, and the network with
its last container (both kept with --keep-daemons).

Attached (`container:` a name, or `label:` key=value matching one container): netspecd is
started in the container (exec) beside what runs there, the container joins the run's
network, and both are undone at the run's end.

Either way the daemon's run directories are under WORK in the container, which a salvage
or `collect` copies out through the engine (get_archive), running or stopped. The engine is
this machine's (DOCKER_HOST, else its socket) or `engine:` ssh://user@host (over paramiko)
or tcp://host:port (with TLS: `tls:` ca, cert, key). A container of this machine's engine
is reached at its address on the run's network; one of a remote engine through its
daemon's port published on the engine's machine.

Another engine's provider (a Kubernetes pod per host, say) is another Host beside this
one, with its own RunFiles: the engine sees only Host.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import re
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from netspec.protocol.errors import ConnectionLost, NetspecError
from netspec.protocol.names import safe_name
from netspec.protocol.runrecord import Limits, Placement

from ..experiment.model import Host as HostSpec
from .fleet import Host
from .images import NETSPECD_LABEL, default_image

PORT = 7420  # netspecd's in the container: each has its own network namespace
WORK = "/var/lib/netspec/work"
PROGRAMS = "/var/lib/netspec/programs"
KEY_DIR = "/etc/netspec"
START_S = 30.0
POLL_S = 0.05
STOP_S = 15.0
API_TIMEOUT_S = 60
RUN_LABEL, HOST_LABEL, CREATED_LABEL = "org.netspec.run", "org.netspec.host", "org.netspec.created"
_NETWORKS = threading.Lock()  # a run's hosts make its network one at a time
MEMORY = re.compile(r"^([0-9]+)([bkmg]?)$", re.IGNORECASE)


def engine_client(engine: str | None, tls: dict[str, str] | None = None) -> Any:
    """A client of the engine at `engine` (None: DOCKER_HOST, else this machine's socket).

    Raises:
        ConnectionLost: the engine does not answer.
    """
    import docker
    import docker.errors

    try:
        if engine is None:
            client = docker.from_env(timeout=API_TIMEOUT_S)
        else:
            config = None
            if tls:
                config = docker.tls.TLSConfig(
                    client_cert=(tls["cert"], tls["key"]) if "cert" in tls else None,
                    ca_cert=tls.get("ca"), verify=tls.get("ca") or True)
            client = docker.DockerClient(base_url=engine, tls=config or False, timeout=API_TIMEOUT_S,
                                         use_ssh_client=False)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        raise ConnectionLost(f"engine {engine or 'local'}",
                             detail=f"the Docker engine does not answer: {exc}") from None
    return client


def memory_bytes(text: str | None) -> int | None:
    if text is None:
        return None
    found = MEMORY.match(str(text).strip())
    if not found:
        raise NetspecError(f"memory: {text!r} is no size (a number of bytes, or with k, m or g)")
    return int(found[1]) * 1024 ** "bkmg".index((found[2] or "b").lower())


class DockerHost(Host):
    """A host with `docker:` in the experiment file."""

    start_deadline_s = START_S + API_TIMEOUT_S

    def __init__(self, spec: HostSpec, run_id: str, key: bytes, keep: bool = False):
        super().__init__(spec)
        assert spec.docker is not None
        self.docker = spec.docker
        self.run_id, self.key, self.keep = run_id, key, keep
        self.client: Any = None
        self.container: Any = None
        self.created = False
        self.exec_pid: int | None = None  # netspecd's in an attached container
        self.joined = False  # an attached container joined the run's network
        self.address = ""
        self.engine_info: dict[str, Any] = {}

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
        return bool(self.docker.engine) and not self.docker.engine.startswith("unix://")

    def _client(self) -> Any:
        if self.client is None:
            self.client = engine_client(self.docker.engine, self.docker.tls)
        return self.client

    async def start(self, log_dir: Path) -> tuple[str, int]:
        return await asyncio.to_thread(self._start, log_dir)

    def _start(self, log_dir: Path) -> tuple[str, int]:
        import docker.errors

        client = self._client()
        try:
            self.engine_info = client.info()
            if self.docker.container or self.docker.label:
                self.container = self._find()
                port = self._start_attached()
            else:
                self.container = self._create()
                self.created = True
                port = self._start_created(log_dir)
            self.container.reload()
        except docker.errors.DockerException as exc:
            raise ConnectionLost(self.name, detail=f"engine {self.docker.engine or 'local'}: {exc}") from None
        networks = self.container.attrs["NetworkSettings"]["Networks"]
        net = networks.get(self.network_name) or next(iter(networks.values()), {})
        self.address = net.get("IPAddress", "")
        if self.remote:
            published = self.container.attrs["NetworkSettings"]["Ports"].get(f"{PORT}/tcp") or []
            if not published:
                raise ConnectionLost(self.name, detail=f"the engine published no port for netspecd's {PORT}")
            return urlsplit(self.docker.engine).hostname or "", int(published[0]["HostPort"])
        if not self.address:
            raise ConnectionLost(self.name, detail=f"container {self.container.name} has no address")
        return self.address, port

    def _image(self) -> tuple[str, str]:
        """The image to run and netspecd's path in it (the label of images netspec built)."""
        import docker.errors

        image = self.docker.image or default_image()
        try:
            found = self._client().images.get(image)
        except docker.errors.ImageNotFound:
            where = f" --engine {self.docker.engine}" if self.docker.engine else ""
            raise ConnectionLost(self.name, detail=f"no image {image} in {self.engine_label}: make it "
                                 f"with `ns_control image build{where}`") from None
        return image, (found.labels or {}).get(NETSPECD_LABEL, "netspecd")

    def _network(self) -> Any:
        """The run's network, made by the first of its hosts (the engine would make two of
        one name if asked at once: its hosts ask one at a time)."""
        import docker.errors

        client = self._client()
        with _NETWORKS:
            with contextlib.suppress(docker.errors.NotFound):
                return client.networks.get(self.network_name)
            return client.networks.create(self.network_name, driver="bridge", check_duplicate=True,
                                          labels={RUN_LABEL: self.run_id, CREATED_LABEL: "1"})

    def _create(self) -> Any:
        image, netspecd = self._image()
        self._network()
        d = self.docker
        return self._client().containers.create(
            image, [*self._netspecd(netspecd), "--announce"],
            name=self.container_name, hostname=self.name, network=self.network_name, detach=True, init=True,
            labels={RUN_LABEL: self.run_id, HOST_LABEL: self.name, CREATED_LABEL: "1"},
            nano_cpus=int(d.cpus * 1e9) if d.cpus else None, mem_limit=memory_bytes(d.memory),
            cap_add=list(d.cap_add), ports={f"{PORT}/tcp": None} if self.remote else None)

    def _netspecd(self, path: str) -> list[str]:
        return [path, "--listen", f"0.0.0.0:{PORT}", "--key", self._key_path(), "--root", WORK]

    def _key_path(self) -> str:
        return f"{KEY_DIR}/{self.run_id}.key"

    def _put_key(self) -> None:
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode="w") as tar:
            for path in (KEY_DIR, PROGRAMS):
                info = tarfile.TarInfo(path.strip("/"))
                info.type, info.mode = tarfile.DIRTYPE, 0o700
                tar.addfile(info)
            _add(tar, self._key_path().strip("/"), (self.key.hex() + "\n").encode(), 0o600)
        self.container.put_archive("/", data.getvalue())

    def _start_created(self, log_dir: Path) -> int:
        self._put_key()
        self.container.start()
        deadline = time.monotonic() + START_S
        while True:
            logs = self.container.logs(stdout=True, stderr=False).decode(errors="replace")
            for line in logs.splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    return int(json.loads(line)["port"])
            self.container.reload()
            if self.container.status not in ("created", "running") or time.monotonic() > deadline:
                said = self.container.logs(stdout=False, stderr=True).decode(errors="replace")
                log_dir.mkdir(parents=True, exist_ok=True)
                (log_dir / "netspecd.log").write_text(said)
                raise ConnectionLost(self.name, detail=f"netspecd did not start in container "
                                     f"{self.container.name} ({self.container.status}) within {START_S:g} s; "
                                     f"it said:\n{said[-2000:]}")
            time.sleep(POLL_S)

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
        self._put_key()
        if self.network_name not in self.container.attrs["NetworkSettings"]["Networks"]:
            self._network().connect(self.container)
            self.joined = True
        state = f"/tmp/netspecd-{self.run_id}-{safe_name(self.name, 'host')}.json"
        netspecd = (self.container.image.labels or {}).get(NETSPECD_LABEL, "netspecd")
        self.container.exec_run([*self._netspecd(netspecd), "--state-file", state], detach=True)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            code, out = self.container.exec_run(["cat", state])
            if code == 0:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    found = json.loads(out)
                    self.exec_pid = int(found["pid"])
                    return int(found["port"])
            time.sleep(POLL_S)
        raise ConnectionLost(self.name, detail=f"netspecd did not start in container {self.container.name} "
                             f"within {START_S:g} s")

    def reachable_at(self, facts: dict[str, Any]) -> str:
        return self.address

    async def place(self, programs: list[str]) -> dict[str, str]:
        """Each program copied into the container (PROGRAMS/<digest>/<name>), in one archive."""
        if not programs:
            return {}
        data, placed = io.BytesIO(), {}
        with tarfile.open(fileobj=data, mode="w") as tar:
            for program in dict.fromkeys(programs):
                body = Path(program).read_bytes()
                where = f"{hashlib.sha256(body).hexdigest()[:16]}/{Path(program).name}"
                placed[program] = f"{PROGRAMS}/{where}"
                _add(tar, where, body, 0o755)
        await asyncio.to_thread(self.container.put_archive, PROGRAMS, data.getvalue())
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
        return ContainerRunFiles(container, f"{WORK}/{safe_name(run_id, 'run id')}", self.engine_label,
                                 owned=(container.labels or {}).get(CREATED_LABEL) == "1" and not self.keep)

    @property
    def engine_label(self) -> str:
        return f"engine {self.docker.engine}" if self.docker.engine else "the local engine"

    async def stop(self, run_id: str = "") -> list[str]:
        return await asyncio.to_thread(self._stop)

    def _stop(self) -> list[str]:
        import docker.errors

        said: list[str] = []
        if self.container is None or self.keep:
            return said
        try:
            if self.created:
                self.container.remove(force=True)
                remove_network(self._client(), self.network_name)
            else:
                if self.exec_pid is not None:
                    self.container.exec_run(["kill", "-TERM", str(self.exec_pid)])
                if self.joined:
                    self._client().networks.get(self.network_name).disconnect(self.container)
                    remove_network(self._client(), self.network_name)
        except docker.errors.NotFound:
            pass
        except docker.errors.DockerException as exc:
            said.append(f"container {self.container.name}: not cleaned up: {exc}")
        self.container = None if self.created else self.container
        return said


def _netspecd(container: Any) -> str:
    return (container.image.labels or {}).get(NETSPECD_LABEL, "netspecd")


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


def _add(tar: tarfile.TarFile, name: str, body: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(body), mode
    tar.addfile(info, io.BytesIO(body))


class ContainerRunFiles:
    """A run's directory in a container, copied out through its engine (get_archive: the
    container may have stopped). The whole directory comes in one archive, kept in a
    temporary file until `remove` or the object's end."""

    def __init__(self, container: Any, root: str, engine: str, owned: bool):
        self.container, self.root, self.owned = container, root, owned
        self.where = f"{engine}, container {container.name}"
        self._archive: IO[bytes] | None = None
        self._lock = threading.Lock()

    def _tar(self) -> tarfile.TarFile | None:
        import docker.errors

        with self._lock:
            if self._archive is None:
                self._archive = tempfile.TemporaryFile(prefix="netspec-salvage-")  # noqa: SIM115 (closed by remove)
                try:
                    stream, _ = self.container.get_archive(self.root)
                except docker.errors.NotFound:
                    return None
                for chunk in stream:
                    self._archive.write(chunk)
            self._archive.seek(0)
            return tarfile.open(fileobj=self._archive, mode="r:")

    def _members(self, tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
        top = Path(self.root).name
        return {m.name.removeprefix(f"{top}/"): m for m in tar.getmembers()
                if m.isreg() and m.name.startswith(f"{top}/")}

    def listing(self) -> list[tuple[str, int]]:
        tar = self._tar()
        if tar is None:
            return []
        with tar:
            return sorted((name, m.size) for name, m in self._members(tar).items())

    def copy(self, relative: str, target: Path) -> int:
        tar = self._tar()
        if tar is None:
            raise NetspecError(f"{self.root} is gone from container {self.container.name}")
        with tar:
            member = self._members(tar).get(relative)
            source = tar.extractfile(member) if member is not None else None
            if source is None:
                raise NetspecError(f"{relative} is not a regular file of the run's directory")
            with open(target, "wb") as dst:
                while chunk := source.read(1 << 20):
                    dst.write(chunk)
                return dst.tell()

    def remove(self) -> None:
        """The run's directory removed: with the container, if netspec made it for the run
        (and keeps it not), else from the running container."""
        import docker.errors

        if self._archive is not None:
            self._archive.close()
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
