"""The runs and campaigns the browser shows: every run directory under the runs root
(`<experiment>/<id>/run.json`) and every campaign under the campaigns root
(`<experiment>/<id>/campaign.json`).

A run or campaign is named in a URL by `<experiment>/<id>`, two safe names, and resolves only
under its root, its links followed: a run directory, or a file of one, that is a link out of
its root is not served (`within`, `inside`). The index reads each run's record once per
change of its files, through the one reader of run.json (`read_run`: its format checked,
its journals folded in), and its status is the run's outcome as `ns_control ls` and `show`
say it (`RunOutcome`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netspec.protocol import ackjournal
from netspec.protocol.campaignrecord import CAMPAIGN_FILE, read_campaign
from netspec.protocol.errors import NetspecError, ProtocolError
from netspec.protocol.names import confined, safe_name
from netspec.protocol.runoutcome import RunOutcome
from netspec.protocol.runrecord import JOURNAL, MERGED, RunStatus, read_run


@dataclass(frozen=True)
class RunEntry:
    """One run as the index lists it."""

    ref: str  # <experiment>/<id>
    experiment: str
    id: str
    status: str  # ok, partial, failed, interrupted, running
    started_ns: int
    duration_s: float | None
    hosts: int
    sha256: str
    campaign: str | None
    point: dict[str, Any] | None
    merged: bool


@dataclass(frozen=True)
class CampaignEntry:
    ref: str
    experiment: str
    id: str
    status: str
    started_ns: int
    points: int
    runs: int


class NotFound(NetspecError):
    """A reference that names no run or campaign under the roots."""


def _ref_path(root: Path, ref: str, what: str) -> Path:
    parts = ref.split("/")
    if len(parts) != 2:
        raise NotFound(f"{what} {ref!r}: not <experiment>/<id>")
    experiment, ident = (safe_name(p, what) for p in parts)
    return root / experiment / ident


def within(root: Path, path: Path) -> bool:
    """Whether `path` is there and, every link on the way followed, still under `root`."""
    try:
        return path.resolve(strict=True).is_relative_to(root.resolve(strict=True))
    except (OSError, RuntimeError):  # not there, or a loop of links
        return False


def inside(run: Path, relative: str) -> Path | None:
    """run / `relative` (a path of safe names) if it is there and does not lead out of the run
    directory by a link (experiment.yaml -> /etc/shadow, hosts/a/c -> /); None if not."""
    try:
        path = confined(run, relative, "file")
    except ProtocolError:
        return None
    return path if within(run, path) else None


def links_out(run: Path) -> list[str]:
    """The run's own files that the browser reads whatever the page (run.json, experiment.yaml,
    the result set's every file) and that lead out of it by a link; a host's and component's
    files are checked as each is read (`inside`)."""
    names = ["run.json", "experiment.yaml", MERGED]
    if (run / MERGED).is_dir() and inside(run, MERGED):
        names += [f"{MERGED}/{p.name}" for p in sorted((run / MERGED).iterdir())]
    return [name for name in names if os.path.lexists(run / name) and inside(run, name) is None]


def _mtime(path: Path) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return 0


class Catalog:
    """The runs root and the campaigns root, read on demand."""

    def __init__(self, runs: Path, campaigns: Path):
        self.runs_root, self.campaigns_root = runs, campaigns
        self._heads: dict[Path, tuple[tuple[int, int, int], RunEntry]] = {}

    def run_path(self, ref: str) -> Path:
        """The directory of run `ref` (`<experiment>/<id>`).

        Raises:
            NotFound: not two safe names, or no run.json there.
            ProtocolError: a part is not a safe name.
        """
        path = _ref_path(self.runs_root, ref, "run")
        if not (path / "run.json").is_file():
            raise NotFound(f"no run {ref} under {self.runs_root}")
        if not within(self.runs_root, path):
            raise NotFound(f"run {ref} leads out of {self.runs_root} by a link: not served")
        if out := links_out(path):
            raise NotFound(f"run {ref}: {', '.join(out[:5])} lead out of the run by a link: not served")
        return path

    def campaign_path(self, ref: str) -> Path:
        path = _ref_path(self.campaigns_root, ref, "campaign")
        if not (path / CAMPAIGN_FILE).is_file():
            raise NotFound(f"no campaign {ref} under {self.campaigns_root}")
        if not (within(self.campaigns_root, path) and inside(path, CAMPAIGN_FILE)):
            raise NotFound(f"campaign {ref} leads out of {self.campaigns_root} by a link: not served")
        return path

    def run_ref(self, path: str | Path) -> str | None:
        """The reference of a run directory, if it lies under the runs root."""
        path = Path(path)
        try:
            rel = path.resolve().relative_to(self.runs_root.resolve())
        except ValueError:
            return None
        return "/".join(rel.parts) if len(rel.parts) == 2 else None

    def index(self) -> tuple[list[RunEntry], list[CampaignEntry], list[str]]:
        """Every run and every campaign under the roots, newest first, and each run.json or
        campaign.json that cannot be read, said rather than left out silently."""
        unreadable: list[str] = []
        return self._runs(unreadable), self._campaigns(unreadable), unreadable

    def _runs(self, unreadable: list[str]) -> list[RunEntry]:
        entries = []
        for path in sorted(self.runs_root.glob("*/*/run.json")):
            if not within(self.runs_root, path.parent) or links_out(path.parent):
                unreadable.append(f"{path}: leads out of {self.runs_root} by a link: not served")
                continue
            if path.parent.is_symlink():
                continue  # a link to a run under the root, listed as itself
            try:
                entries.append(self._entry(path.parent))
            except (OSError, NetspecError) as exc:
                unreadable.append(f"{path}: {exc}")
        entries.sort(key=lambda e: e.started_ns, reverse=True)
        return entries

    def _entry(self, run: Path) -> RunEntry:
        stat = os.stat(run / "run.json")
        key = (stat.st_mtime_ns, stat.st_size, _mtime(run / JOURNAL), _mtime(run / ackjournal.ACK_JOURNAL))
        cached = self._heads.get(run)
        if cached and cached[0] == key and cached[1].status != RunStatus.RUNNING:
            return cached[1]
        record = read_run(run)
        campaign = record.campaign
        entry = RunEntry(f"{run.parent.name}/{run.name}", record.experiment or run.parent.name,
                         record.id, RunOutcome.of(record).status, record.started_ns, record.duration_s,
                         len(record.host_names), record.experiment_sha256,
                         campaign.id if campaign else None, campaign.point if campaign else None,
                         (run / MERGED / "summary.json").is_file())
        self._heads[run] = (key, entry)
        return entry

    def _campaigns(self, unreadable: list[str]) -> list[CampaignEntry]:
        entries = []
        for path in sorted(self.campaigns_root.glob(f"*/*/{CAMPAIGN_FILE}")):
            if not (within(self.campaigns_root, path.parent) and inside(path.parent, CAMPAIGN_FILE)):
                unreadable.append(f"{path}: leads out of {self.campaigns_root} by a link: not served")
                continue
            try:
                record = read_campaign(path.parent)
            except NetspecError as exc:  # it names the file and the key
                unreadable.append(str(exc))
                continue
            entries.append(CampaignEntry(
                f"{path.parent.parent.name}/{path.parent.name}", record.experiment, record.id,
                record.status, record.started_ns, len(record.points), len(record.runs())))
        entries.sort(key=lambda e: e.started_ns, reverse=True)
        return entries
