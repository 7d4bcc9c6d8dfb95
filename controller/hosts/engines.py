"""A Docker engine as netspec's container hosts use it (controller/hosts/docker.py): a
client of it, the run's network removed once empty, and a run's directory in a container
copied out through it (`ContainerRunFiles`, what a salvage and `collect` read)."""

from __future__ import annotations

import re
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import IO, Any

from netspec.protocol.errors import ConnectionLost, NetspecError

API_TIMEOUT_S = 60
TLS_API_VERSION = "1.40"  # Docker 19.03 and later: every call made here is in it
CREATED_LABEL = "org.netspec.created"
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
            # With a CA of the file's, the API version is given rather than asked at once:
            # requests takes REQUESTS_CA_BUNDLE over the client's CA unless the client ignores
            # the environment, which it can be told only once made.
            client = docker.DockerClient(base_url=engine, tls=config or False, timeout=API_TIMEOUT_S,
                                         use_ssh_client=False, version=TLS_API_VERSION if config else None)
            if config is not None:
                client.api.trust_env = False
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
                try:
                    stream, _ = self.container.get_archive(self.root)
                except docker.errors.NotFound:
                    return None
                except docker.errors.DockerException as exc:
                    raise NetspecError(f"{self.root} not copied out of {self.where}: {exc}") from None
                archive = tempfile.TemporaryFile(prefix="netspec-salvage-")  # noqa: SIM115 (closed by remove)
                for chunk in stream:
                    archive.write(chunk)
                self._archive = archive  # kept only whole: a failed copy is tried again
            self._archive.seek(0)
            try:
                return tarfile.open(fileobj=self._archive, mode="r:")
            except tarfile.TarError as exc:
                raise NetspecError(f"{self.root}'s archive from {self.where} is unreadable: {exc}") from None

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
