"""Copy a run directory from another controller host over SSH (SFTP), to merge it here.

`[user@]host[:RUNS]` names the host (or an SSH config alias) and its runs directory (`runs`
in the login directory by default). A file already here with the remote size is not copied
again, so an interrupted pull resumes; the remote merged/ is left behind, since it is made
again here.
"""

from __future__ import annotations

import posixpath
import stat
from pathlib import Path

import paramiko
from netspec.analysis.resultset import MERGED
from netspec.protocol.errors import NetspecError

from ..experiment.sshtargets import resolve
from ..hosts.ssh import SSHConnection


def split_source(source: str) -> tuple[str, str]:
    """'user@host:dir' -> ('user@host', 'dir'); the directory defaults to runs."""
    host, _, runs = source.partition(":")
    return host, runs or "runs"


def pull_run(source: str, ref: str, runs_root: Path, accept_new: bool = False) -> Path:
    """Copy run `ref` (an id, a unique suffix of one, or latest) from `source` into
    runs_root/<experiment>/<id>/ and return that directory.

    Raises:
        ConnectionLost: the host cannot be reached or logged into.
        NetspecError: no such run there, or it is ambiguous.
    """
    host, runs = split_source(source)
    conn = SSHConnection(host, resolve(host), accept_new)
    conn.open()
    try:
        with conn.client.open_sftp() as sftp:  # type: ignore[union-attr]
            remote = _find(sftp, runs, ref, host)
            experiment, run_id = posixpath.basename(posixpath.dirname(remote)), posixpath.basename(remote)
            local = runs_root / experiment / run_id
            _copy_tree(sftp, remote, local, skip=MERGED)
    finally:
        conn.close()
    return local


def _find(sftp: paramiko.SFTPClient, runs: str, ref: str, host: str) -> str:
    if ref == "latest":
        try:
            target = sftp.normalize(posixpath.join(runs, "latest"))
        except OSError as exc:
            raise NetspecError(f"{host}: no runs/latest under {runs}") from exc
        return target
    if ref.startswith("/"):
        return ref
    try:
        experiments = [e.filename for e in sftp.listdir_attr(runs) if stat.S_ISDIR(e.st_mode or 0)]
    except OSError as exc:
        raise NetspecError(f"{host}: cannot list {runs}: {exc.strerror or exc}") from exc
    matches = [posixpath.join(runs, e, r) for e in experiments if e != "latest"
               for r in sftp.listdir(posixpath.join(runs, e)) if r.endswith(ref)]
    if len(matches) != 1:
        raise NetspecError(f"{host}: {'no run' if not matches else f'{len(matches)} runs'} "
                           f"'{ref}' under {runs}" + (": be more specific" if matches else ""))
    return matches[0]


def _copy_tree(sftp: paramiko.SFTPClient, remote: str, local: Path, skip: str = "") -> None:
    local.mkdir(parents=True, exist_ok=True)
    for entry in sftp.listdir_attr(remote):
        source, target = posixpath.join(remote, entry.filename), local / entry.filename
        if stat.S_ISDIR(entry.st_mode or 0):
            if entry.filename != skip:
                _copy_tree(sftp, source, target)
        elif stat.S_ISREG(entry.st_mode or 0):
            if target.is_file() and target.stat().st_size == entry.st_size:
                continue
            partial = target.with_name(target.name + ".part")
            sftp.get(source, str(partial))
            partial.replace(target)
