"""campaign.json, a campaign's checkpoint (RUNS/campaigns/<experiment>/<id>/campaign.json), as
one typed structure: the controller writes it (controller/campaigns/campaign.py) and everyone
reads it through `read_campaign` here, `resume`, `report`, the analysis of its points and the
browser alike. A run's status in it is its `RunOutcome`'s (protocol/runoutcome.py).

campaign.json version history (readers accept every older version):
  1: first format (id, experiment, file, text, sha256, status, started_ns, presetup_done,
     current, points, each point's params, label, runs and done). Keys added since, each
     optional: postcleanup_done, a run's warmup, differs and starved. The first files did not say
     their format. Since the record is typed (msgspec), every key is written, and a key of
     the wrong type is refused naming where it is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from .errors import NetspecError
from .versioned import decode_versioned

CAMPAIGN_FORMAT = 1
CAMPAIGN_FILE = "campaign.json"
SETUP_FAILED = "setup failed"  # a point's run that never started: its setup hook failed


class CampaignRun(msgspec.Struct, kw_only=True):
    """A run of a point: its directory, its status (its RunOutcome's; `SETUP_FAILED` when
    there was no run), the one number it gives its point, whether it counts as a repetition
    (not a warm-up, and like the point's first counted run: `differs` says how it is not),
    and what its merge said of components starved of CPU in it (`starved`: refused, unless
    the campaign counts such runs)."""

    id: str | None
    path: str | None
    status: str
    value: float | None = None
    counted: bool = False
    warmup: bool = False
    differs: list[str] = []
    starved: list[str] = []


class Point(msgspec.Struct, kw_only=True):
    """A point of the sweep: its parameters, its label, its runs, and why it is done (runs,
    until, max, failures; None while it needs another run)."""

    params: dict[str, Any]
    label: str
    runs: list[CampaignRun] = []
    done: str | None = None


class Current(msgspec.Struct):
    """The run under way: its point's index, and its directory once it has one."""

    point: int
    run: str | None = None


class CampaignRecord(msgspec.Struct, kw_only=True):
    """campaign.json: the experiment file as it was (`file`, `text`, `sha256`), the
    campaign's status (running, done, failed, interrupted), its hooks done once, the run under
    way and the points."""

    format: int = CAMPAIGN_FORMAT
    id: str
    experiment: str
    file: str
    text: str
    sha256: str
    status: str
    started_ns: int
    presetup_done: bool = False
    postcleanup_done: bool = False
    current: Current | None = None
    points: list[Point] = []

    def runs(self) -> list[CampaignRun]:
        """Every run of every point."""
        return [r for p in self.points for r in p.runs]


def encode(record: CampaignRecord) -> bytes:
    """The record as it is written: JSON indented (a campaign's checkpoint is small, and read
    by people resuming it)."""
    return msgspec.json.format(msgspec.json.encode(record), indent=1) + b"\n"


def decode(data: bytes, where: str) -> CampaignRecord:
    """A campaign.json's bytes as the typed record (Raises: NetspecError, as `decode_versioned`)."""
    return decode_versioned(data, where, CampaignRecord, CAMPAIGN_FORMAT, "campaign record")


def read_campaign(campaign: Path) -> CampaignRecord:
    """The record of the campaign directory `campaign`.

    Raises:
        NetspecError: naming the file, when campaign.json is missing, unreadable, not a
            campaign record, or of a format newer than this netspec reads.
    """
    where = campaign / CAMPAIGN_FILE
    try:
        data = where.read_bytes()
    except OSError as exc:
        raise NetspecError(f"{where}: unreadable ({exc})") from exc
    return decode(data, str(where))


def write_campaign(campaign: Path, record: CampaignRecord) -> None:
    """Write `record` as the campaign directory's campaign.json, whole or not at all (a
    campaign killed mid-write keeps its last checkpoint)."""
    tmp = campaign / f".{CAMPAIGN_FILE}.tmp"
    tmp.write_bytes(encode(record))
    os.replace(tmp, campaign / CAMPAIGN_FILE)
