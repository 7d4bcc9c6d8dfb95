"""The runs and campaigns the browser shows: every run directory under the runs root
(`<experiment>/<id>/run.json`) and every campaign under the campaigns root
(`<experiment>/<id>/campaign.json`).

A run or campaign is named in a URL by `<experiment>/<id>`, two safe names, and resolves only
under its root. The index reads each run.json once per change of the file, and only the few
fields it shows (msgspec skips the rest: a 1000-host run's run.json is megabytes).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from netspec.protocol.errors import NetspecError
from netspec.protocol.names import safe_name
from netspec.protocol.runoutcome import RunOutcome
from netspec.protocol.runrecord import JOURNAL, Controller, RunRecord

CAMPAIGN_FILE = "campaign.json"


class _Head(msgspec.Struct):
    """What the index reads of a run.json."""

    id: str = ""
    experiment: str = ""
    status: str = "unknown"
    started_ns: int = 0
    duration_s: float | None = None
    experiment_sha256: str = ""
    campaign: dict[str, Any] | None = None
    controller: Controller = msgspec.field(default_factory=Controller)
    hosts: dict[str, Any] = {}
    plan: dict[str, Any] = {}


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
        return path

    def campaign_path(self, ref: str) -> Path:
        path = _ref_path(self.campaigns_root, ref, "campaign")
        if not (path / CAMPAIGN_FILE).is_file():
            raise NotFound(f"no campaign {ref} under {self.campaigns_root}")
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
            if path.parent.is_symlink():
                continue
            try:
                entries.append(self._entry(path.parent))
            except (OSError, ValueError, msgspec.DecodeError) as exc:
                unreadable.append(f"{path}: {exc}")
        entries.sort(key=lambda e: e.started_ns, reverse=True)
        return entries

    def _entry(self, run: Path) -> RunEntry:
        stat = os.stat(run / "run.json")
        try:
            journal = os.stat(run / JOURNAL).st_mtime_ns
        except FileNotFoundError:
            journal = 0
        key = (stat.st_mtime_ns, stat.st_size, journal)
        cached = self._heads.get(run)
        if cached and cached[0] == key and cached[1].status != "running":
            return cached[1]
        head = msgspec.json.decode((run / "run.json").read_bytes(), type=_Head)
        status = RunOutcome.of(RunRecord(format=1, id=head.id, experiment=head.experiment, status=head.status,
                                         controller=head.controller)).status
        campaign = head.campaign or {}
        entry = RunEntry(f"{run.parent.name}/{run.name}", head.experiment or run.parent.name,
                         head.id or run.name, status, head.started_ns, head.duration_s,
                         len(head.plan.get("hosts") or head.hosts), head.experiment_sha256,
                         campaign.get("id"), campaign.get("point"),
                         (run / "merged" / "summary.json").is_file())
        self._heads[run] = (key, entry)
        return entry

    def _campaigns(self, unreadable: list[str]) -> list[CampaignEntry]:
        entries = []
        for path in sorted(self.campaigns_root.glob(f"*/*/{CAMPAIGN_FILE}")):
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError) as exc:
                unreadable.append(f"{path}: {exc}")
                continue
            entries.append(CampaignEntry(
                f"{path.parent.parent.name}/{path.parent.name}", state.get("experiment", ""),
                state.get("id", path.parent.name), state.get("status", "unknown"),
                state.get("started_ns", 0), len(state.get("points", [])),
                sum(len(p.get("runs", [])) for p in state.get("points", []))))
        entries.sort(key=lambda e: e.started_ns, reverse=True)
        return entries
