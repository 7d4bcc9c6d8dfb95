"""A run's directory on a host, read without the host's daemon: on the local filesystem
(a local host), over SFTP (an SSH host), or as one tar archive copied out of a container or a
pod (`ArchiveRunFiles`). Salvage (gather/salvage.py) copies from it. And the other way, the
programs copied into a container or a pod as one archive (`programs_archive`)."""

from __future__ import annotations

import abc
import hashlib
import io
import os
import posixpath
import shutil
import stat
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

from netspec.protocol.errors import NetspecError
from netspec.protocol.exits import end_run_processes
from netspec.protocol.names import confined, safe_name

if TYPE_CHECKING:
    from .ssh import SSHConnection

CHUNK = 4 * 1024 * 1024
LEFTOVER_GRACE_S = 2.0  # a lost daemon's components: from SIGTERM to SIGKILL


class RunFiles(Protocol):
    """A run's directory on a host, read without the host's daemon."""

    where: str  # how it is reached, for people
    root: Path | str  # the run's directory on the host

    def listing(self) -> list[tuple[str, int]]:
        """(path relative to the run's directory, size) of every regular file in it."""

    def copy(self, relative: str, target: Path) -> int:
        """Copy one listed file to `target`; the bytes copied."""

    def remove(self) -> None:
        """Delete the run's directory on the host."""


def local_run_files(root: Path, run_id: str, host: str) -> LocalRunFiles:
    """A local host's run directory under its daemon's `root`; what is left of the run's
    processes there is ended first (SIGTERM, so that streams are flushed, then SIGKILL)."""
    end_run_processes(run_id, LEFTOVER_GRACE_S, host)
    return LocalRunFiles(root / safe_name(run_id, "run id"))


class LocalRunFiles:
    """A run's directory on this machine (a local host's daemon root)."""

    def __init__(self, root: Path):
        self.root, self.where = root, "the local filesystem"

    def listing(self) -> list[tuple[str, int]]:
        found = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            for name in filenames:
                st = os.lstat(os.path.join(dirpath, name))
                if stat.S_ISREG(st.st_mode):
                    found.append((os.path.relpath(os.path.join(dirpath, name), self.root), st.st_size))
        return sorted(found)

    def copy(self, relative: str, target: Path) -> int:
        # Non-blocking and without following links: a FIFO put there since the listing
        # is refused, not waited on.
        fd = os.open(confined(self.root, relative, "file name"),
                     os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        with open(fd, "rb") as src:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise NetspecError(f"{relative} is no longer a regular file")
            with open(target, "wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
                return dst.tell()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class SFTPRunFiles:
    """A run's directory on an SSH host, over the host's SSH connection."""

    def __init__(self, conn: SSHConnection, root: str):
        self.conn, self.root = conn, root
        self.where = f"SFTP to {conn.target.label}"

    def listing(self) -> list[tuple[str, int]]:
        found = []
        with self.conn.sftp() as sftp:
            try:
                sftp.stat(self.root)
            except FileNotFoundError:
                return []  # nothing of the run left there (its daemon cleaned up, or never wrote)
            pending = [""]
            while pending:
                relative = pending.pop()
                for entry in sftp.listdir_attr(posixpath.join(self.root, relative)):
                    path = posixpath.join(relative, entry.filename)
                    if stat.S_ISDIR(entry.st_mode or 0):
                        pending.append(path)
                    elif stat.S_ISREG(entry.st_mode or 0):
                        found.append((path, entry.st_size or 0))
        return sorted(found)

    def copy(self, relative: str, target: Path) -> int:
        with self.conn.sftp() as sftp:
            sftp.get(posixpath.join(self.root, relative), str(target))
        return target.stat().st_size

    def remove(self) -> None:
        code, _, err = self.conn.run(["rm", "-rf", "--", self.root])
        if code:
            raise NetspecError(f"could not remove {self.root}: {err.strip()}")


class ArchiveRunFiles(abc.ABC):
    """A run's directory that comes as one tar archive (`_fetch`, each kind's: a container's
    through its engine, a pod's through the exec API), kept in a temporary file until
    `_drop`, and listed and copied from there."""

    def __init__(self, root: str, where: str):
        self.root, self.where = root, where
        self._archive: IO[bytes] | None = None
        self._lock = threading.Lock()

    @abc.abstractmethod
    def _fetch(self, into: IO[bytes]) -> bool:
        """The archive of the directory written into `into`; False if the directory is gone.

        Raises:
            NetspecError: it could not be copied out."""

    def _tar(self) -> tarfile.TarFile | None:
        """The archive, opened for one read (fetched once, and kept only whole: a failed
        copy is tried again); None if the directory is gone."""
        with self._lock:
            if self._archive is None:
                archive = tempfile.TemporaryFile(prefix="netspec-salvage-")  # noqa: SIM115 (closed by _drop)
                try:
                    if not self._fetch(archive):
                        archive.close()
                        return None
                except BaseException:
                    archive.close()
                    raise
                self._archive = archive
            self._archive.seek(0)
            try:
                return tarfile.open(fileobj=self._archive, mode="r:")
            except tarfile.TarError as exc:
                raise NetspecError(f"{self.root}'s archive from {self.where} is unreadable: {exc}") from None

    def _drop(self) -> None:
        if self._archive is not None:
            self._archive.close()
            self._archive = None

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
            raise NetspecError(f"{self.root} is gone from {self.where}")
        with tar:
            member = self._members(tar).get(relative)
            source = tar.extractfile(member) if member is not None else None
            if source is None:
                raise NetspecError(f"{relative} is not a regular file of the run's directory")
            with open(target, "wb") as dst:
                while chunk := source.read(1 << 20):
                    dst.write(chunk)
                return dst.tell()


def add_file(tar: tarfile.TarFile, name: str, body: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(body), mode
    tar.addfile(info, io.BytesIO(body))


def programs_archive(programs: list[str], root: str) -> tuple[bytes, dict[str, str]]:
    """Each program as root/<digest>/<name> in one tar archive (relative to root), and where
    each will be."""
    data, placed = io.BytesIO(), {}
    with tarfile.open(fileobj=data, mode="w") as tar:
        for program in dict.fromkeys(programs):
            body = Path(program).read_bytes()
            where = f"{hashlib.sha256(body).hexdigest()[:16]}/{Path(program).name}"
            placed[program] = f"{root}/{where}"
            add_file(tar, where, body, 0o755)
    return data.getvalue(), placed
