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
from netspec.protocol.runrecord import RunRecord, RunStatus, read_run

from ..record.rundir import utc_iso

CRATE = "ro-crate-metadata.json"
RO_CRATE = "https://w3id.org/ro/crate/1.1"
RUN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{6}")  # each name fullmatched: "$" takes a final newline
EXPERIMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_MEMBERS = 100_000
MAX_CRATE = 64 << 20  # the crate's JSON: a listing, never the data
MAX_BYTES = 64 * 10**9  # what an import unpacks at most, unless told more (import --max-size)


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
    if record.status == RunStatus.RUNNING:  # as its controller last saved it
        if RunOutcome.of(record).status == RunStatus.RUNNING:
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


def _top(archive: Path, m: tarfile.TarInfo, top: PurePosixPath | None) -> PurePosixPath:
    """The file's experiment/run id, its name checked: relative, no '..', a regular file, under
    the same experiment/run id as the archive's first file (`top`)."""
    name = PurePosixPath(m.name)
    if name.is_absolute() or ".." in name.parts or len(name.parts) < 3:
        raise BundleError(f"{archive}: member '{m.name}' is not inside a run directory")
    if not m.isfile():
        raise BundleError(f"{archive}: member '{m.name}' is not a file or directory (links are refused)")
    here = PurePosixPath(*name.parts[:2])
    if (top is not None and here != top) or not EXPERIMENT.fullmatch(here.parts[0]) \
            or not RUN_ID.fullmatch(here.parts[-1]):
        raise BundleError(f"{archive}: member '{m.name}' is not under one runs/<experiment>/<run id>/")
    return here


def import_run(archive: Path, runs: Path, limit: int = MAX_BYTES) -> Path:
    """Checks the bundle `archive` (names, the crate, every file's size and sha256) and
    unpacks it into `runs`; returns the run directory. An existing run of that id is never
    overwritten. What it writes is bounded as it unpacks: the crate comes first, and only the
    files it lists, each at its listed size, their total within `limit` bytes and the free
    space, are written (a 2 MB archive of zeros once wrote 2 GB before its hash was checked).

    Raises:
        BundleError: naming the archive, and the member or what the crate says.
    """
    runs.mkdir(parents=True, exist_ok=True)
    try:
        with (tarfile.open(archive, "r:*") as tar,
              tempfile.TemporaryDirectory(prefix=".import-", dir=runs) as tmp):
            return _unpack(tar, archive, runs, Path(tmp), limit)
    except (OSError, EOFError, tarfile.TarError, zlib.error) as exc:
        raise BundleError(f"{archive}: not a readable run bundle ({exc})") from exc


def _unpack(tar: tarfile.TarFile, archive: Path, runs: Path, tmp: Path, limit: int) -> Path:
    """One pass over the archive as it decompresses (its member count, each member's size
    checked before a byte of it is written), the run staged in `tmp` and moved into `runs`."""
    top: PurePosixPath | None = None
    listed: dict[str, tuple[int, str]] = {}  # a file of the run -> its size and sha256, from the crate
    written: set[str] = set()
    for n, m in enumerate(tar):
        if n >= MAX_MEMBERS:
            raise BundleError(f"{archive}: more than {MAX_MEMBERS} members")
        if m.isdir():
            continue  # a directory is made for the files in it, never from its own member
        here = _top(archive, m, top)
        if top is None and (runs / here).exists():
            raise BundleError(f"run {here.parts[1]} is already in {runs} ({runs / here})")
        top = here
        rel = str(PurePosixPath(*PurePosixPath(m.name).parts[2:]))
        if rel in written:
            raise BundleError(f"{archive}: member '{m.name}' appears twice")
        if not written:
            if rel != CRATE:
                raise BundleError(f"{archive}: its first file is '{m.name}', not its {CRATE} "
                                  "(export writes the crate first)")
            if m.size > MAX_CRATE:
                raise BundleError(f"{archive}: its {CRATE} is {m.size} bytes (at most {MAX_CRATE})")
        elif rel not in listed:
            raise BundleError(f"{archive}: its files differ from its crate (not listed: {[rel]})")
        elif m.size != listed[rel][0]:
            raise BundleError(f"{archive}: member '{m.name}' is {m.size} bytes, its crate says "
                              f"{listed[rel][0]}: nothing of it unpacked")
        path = tmp.joinpath(top.parts[1], *PurePosixPath(rel).parts)  # safe: checked by _top
        digest = _copy(tar, m, path)
        if not written:
            listed = _crate(path, archive, runs, limit)
        elif digest != listed[rel][1]:
            raise BundleError(f"{archive}: {rel} does not match its sha256 in the crate")
        written.add(rel)
    if top is None:
        raise BundleError(f"{archive}: empty")
    missing = sorted(set(listed) - written)
    if missing:
        raise BundleError(f"{archive}: its files differ from its crate (missing: {missing[:5]})")
    staging, dest = tmp / top.parts[1], runs / top
    read_run(staging)  # and run.json reads as a run's record
    if dest.exists():
        raise BundleError(f"run {top.parts[1]} is already in {runs} ({dest})")
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(staging, dest)
    return dest


def _copy(tar: tarfile.TarFile, m: tarfile.TarInfo, path: Path) -> str:
    """Writes the member (a regular file, its size checked) to `path`; returns its sha256."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    source = tar.extractfile(m)
    assert source is not None  # a regular file
    digest = hashlib.sha256()
    with source, open(path, "xb", opener=_private) as out:
        while chunk := source.read(1 << 20):  # the tar's reader stops at the member's size
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()


def _private(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def _crate(path: Path, archive: Path, runs: Path, limit: int) -> dict[str, tuple[int, str]]:
    """The files the crate at `path` lists, each with its size and sha256, once their total
    fits `limit` and the free space under `runs`: nothing else is written."""
    try:
        metadata = json.loads(path.read_bytes())
        graph = {e["@id"]: e for e in metadata["@graph"]}
        parts = [graph[p["@id"]] for p in graph["./"]["hasPart"]]
        listed = {str(p["@id"]): (p["contentSize"], str(p["sha256"])) for p in parts}
    except (ValueError, KeyError, TypeError) as exc:
        raise BundleError(f"{archive}: no valid {CRATE} ({exc})") from exc
    sizes = [size for size, _ in listed.values()]
    if not all(isinstance(size, int) and not isinstance(size, bool) and size >= 0 for size in sizes):
        raise BundleError(f"{archive}: its {CRATE} gives a file a size that is not a number of bytes")
    total, free = sum(sizes), shutil.disk_usage(runs).free
    if total > min(limit, free):
        said = f"the limit of {limit} (import --max-size)" if total > limit else f"the {free} free in {runs}"
        raise BundleError(f"{archive}: its files are {total} bytes, more than {said}: nothing unpacked")
    return listed
