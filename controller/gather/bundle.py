"""A run as one archive for mail and archives, as pos does for its experiments: the run
directory in a tar.gz with an RO-Crate 1.1 metadata file (ro-crate-metadata.json) that
describes the experiment, its hash, the programs, each host's facts and clock, the software
versions and the result set, with every file's sha256. `import` checks all of it before a
byte lands under the runs directory, so that `report`, `fetch` and `rerun` work on it."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec
from netspec.protocol.errors import NetspecError
from netspec.protocol.runoutcome import RunOutcome
from netspec.protocol.runrecord import RunRecord, read_run

from ..record.rundir import utc_iso

CRATE = "ro-crate-metadata.json"
RO_CRATE = "https://w3id.org/ro/crate/1.1"
RUN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}")  # each name fullmatched: "$" takes a final newline
EXPERIMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_MEMBERS = 100_000


class BundleError(NetspecError):
    """An archive is not a netspec run bundle, or not an intact one."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _files(run: Path) -> list[Path]:
    """The run directory's files, as a bundle holds them: regular files (no links), its own
    crate left out."""
    return sorted(p for p in run.rglob("*") if p.is_file() and not p.is_symlink() and p != run / CRATE)


def crate(run: Path, record: RunRecord) -> dict[str, Any]:
    """The RO-Crate metadata of the run directory `run`: every file with its size and sha256."""
    programs = {kept.copy: source for source, kept in record.programs.items()}
    parts = []
    for path in _files(run):
        rel = str(path.relative_to(run))
        part = {"@id": rel, "@type": "File", "contentSize": path.stat().st_size, "sha256": _sha256(path),
                **_describe(path.relative_to(run))}
        if rel in programs:
            part.update({"@type": ["File", "SoftwareSourceCode"], "name": f"the program {programs[rel]}",
                         "identifier": programs[rel]})
        parts.append(part)
    hosts = []
    for name, info in sorted(record.hosts.items()):
        facts = run / "hosts" / name / "facts.json"
        hosts.append({"@id": f"#host-{name}", "@type": "Thing", "name": f"host {name}",
                      **({"subjectOf": {"@id": f"hosts/{name}/facts.json"}} if facts.is_file() else {}),
                      **({"clock": msgspec.to_builtins(info.clock)} if info.clock else {}),
                      **({"placement": msgspec.to_builtins(info.placement)} if info.placement else {})})
    software = [{"@id": f"#{name}", "@type": "SoftwareApplication", "name": name, "version": version}
                for name, version in sorted(record.versions.items())]
    root = {"@id": "./", "@type": "Dataset", "name": f"netspec run {record.id} of {record.experiment}",
            "description": f"{record.experiment}: {RunOutcome.of(record).status}", "identifier": record.id,
            "datePublished": record.started or utc_iso(record.started_ns),
            "experiment_sha256": record.experiment_sha256,
            "mainEntity": {"@id": "experiment.yaml"}, "hasPart": [{"@id": p["@id"]} for p in parts],
            "about": [{"@id": h["@id"]} for h in hosts], "instrument": [{"@id": s["@id"]} for s in software]}
    return {"@context": f"{RO_CRATE}/context", "@graph": [
        {"@id": CRATE, "@type": "CreativeWork", "conformsTo": {"@id": RO_CRATE}, "about": {"@id": "./"}},
        root, *parts, *hosts, *software]}


def _describe(path: Path) -> dict[str, Any]:
    """What a file of the run directory is, for people reading the crate."""
    if path.name == "experiment.yaml" and len(path.parts) == 1:
        return {"name": "the experiment file", "encodingFormat": "application/yaml"}
    if path.name == "run.json" and len(path.parts) == 1:
        return {"name": "the run's record: plan, steps, acks, hosts, versions",
                "encodingFormat": "application/json"}
    if path.parts[0] == "merged" and path.suffix == ".parquet":
        return {"name": f"result set: {path.stem} (docs/results.md)",
                "encodingFormat": "application/vnd.apache.parquet"}
    if path.suffix == ".ds":
        return {"name": "a datastream (docs/stream-format.md)"}
    return {}


def export_run(run: Path, to: Path) -> Path:
    """Writes `run` (a run directory) with its crate into the archive `to` (.tar.gz)."""
    record = read_run(run)
    if record.status == "running":  # as its controller last saved it
        if RunOutcome.of(record).status == "running":
            raise BundleError(f"run {record.id} is still running: nothing to export yet")
        raise BundleError(f"run {record.id} was interrupted (its controller was killed) before it "
                          f"gathered what its hosts hold: `ns_control collect {record.id}` gathers it "
                          "and settles the run; export it then")
    metadata = json.dumps(crate(run, record), indent=1).encode()
    top = PurePosixPath(record.experiment, record.id)
    tmp = to.with_name(f".{to.name}.tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        info = tarfile.TarInfo(str(top / CRATE))
        info.size, info.mode = len(metadata), 0o600
        tar.addfile(info, io.BytesIO(metadata))
        for path in _files(run):
            tar.add(path, str(top / path.relative_to(run)), recursive=False)
    tmp.replace(to)
    return to


def _members(tar: tarfile.TarFile, archive: Path) -> tuple[PurePosixPath, list[tarfile.TarInfo]]:
    """The archive's top directory (experiment/run id) and its files, every name checked."""
    members, seen = [], set()
    top: PurePosixPath | None = None
    for n, m in enumerate(tar):
        if n >= MAX_MEMBERS:
            raise BundleError(f"{archive}: more than {MAX_MEMBERS} members")
        name = PurePosixPath(m.name)
        if name.is_absolute() or ".." in name.parts or (len(name.parts) < 3 and not m.isdir()):
            raise BundleError(f"{archive}: member '{m.name}' is not inside a run directory")
        if not (m.isfile() or m.isdir()):
            raise BundleError(f"{archive}: member '{m.name}' is not a file or directory (links are refused)")
        here = PurePosixPath(*name.parts[:2])
        if top is None:
            top = here
        if here != top or not EXPERIMENT.fullmatch(top.parts[0]) or not RUN_ID.fullmatch(top.parts[1]):
            raise BundleError(f"{archive}: member '{m.name}' is not under one runs/<experiment>/<run id>/")
        if m.isfile():
            if m.name in seen:
                raise BundleError(f"{archive}: member '{m.name}' appears twice")
            seen.add(m.name)
            members.append(m)
    if top is None:
        raise BundleError(f"{archive}: empty")
    return top, members


def import_run(archive: Path, runs: Path) -> Path:
    """Checks the bundle `archive` (names, the crate, every file's sha256) and unpacks it into
    `runs`; returns the run directory. An existing run of that id is never overwritten."""
    runs.mkdir(parents=True, exist_ok=True)
    try:
        with (tarfile.open(archive, "r:*") as tar,
              tempfile.TemporaryDirectory(prefix=".import-", dir=runs) as tmp):
            return _unpack(tar, archive, runs, Path(tmp))
    except (OSError, EOFError, tarfile.TarError, zlib.error) as exc:
        raise BundleError(f"{archive}: not a readable run bundle ({exc})") from exc


def _unpack(tar: tarfile.TarFile, archive: Path, runs: Path, tmp: Path) -> Path:
    top, members = _members(tar, archive)
    dest = runs / top
    if dest.exists():
        raise BundleError(f"run {top.parts[1]} is already in {runs} ({dest})")
    staging = tmp / top.parts[1]
    for m in members:
        # Each name was checked in _members: relative, no '..', under experiment/run-id/.
        path = staging.joinpath(*PurePosixPath(m.name).parts[2:])
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        source = tar.extractfile(m)
        assert source is not None  # a regular file
        with source, open(path, "xb", opener=_private) as out:
            shutil.copyfileobj(source, out)
    _verify(staging, archive)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(staging, dest)
    return dest


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def _verify(run: Path, archive: Path) -> None:
    try:
        metadata = json.loads((run / CRATE).read_text())
        graph = {e["@id"]: e for e in metadata["@graph"]}
        parts = [graph[p["@id"]] for p in graph["./"]["hasPart"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BundleError(f"{archive}: no valid {CRATE} ({exc})") from exc
    listed = {p["@id"] for p in parts}
    present = {str(p.relative_to(run)) for p in _files(run)}
    if present != listed:
        extra, missing = sorted(present - listed), sorted(listed - present)
        raise BundleError(f"{archive}: its files differ from its crate (not listed: {extra[:5]}, "
                          f"missing: {missing[:5]})")
    for part in parts:
        if _sha256(run / part["@id"]) != part.get("sha256"):
            raise BundleError(f"{archive}: {part['@id']} does not match its sha256 in the crate")
    read_run(run)  # and run.json reads as a run's record
