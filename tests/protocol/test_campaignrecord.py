"""campaign.json, a campaign's checkpoint, read and written only as its typed record: the files
netspec wrote before it was typed read whole, and a value of the wrong type is refused naming
the file and the key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from netspec.protocol.campaignrecord import (
    CAMPAIGN_FILE,
    CampaignRun,
    Point,
    encode,
    read_campaign,
    write_campaign,
)
from netspec.protocol.errors import NetspecError
from support import REPO

# Written by main before the record was typed (a warm-up, a point failed, a value per counted run).
STORED = sorted((REPO / "tests" / "data" / "campaigns").glob(f"*/*/{CAMPAIGN_FILE}"))


def as_written_now(state: dict) -> dict:
    """An untyped campaign.json's values as the typed record writes them: its format said, and
    every key of a run (`differs` and `starved` empty where nothing differed or starved)."""
    return {"format": 1, **state, "points": [
        {**p, "runs": [{"warmup": False, "differs": [], "starved": [], **r} for r in p["runs"]]}
        for p in state["points"]]}


@pytest.mark.parametrize("path", STORED, ids=lambda p: p.parent.parent.name)
def test_a_campaign_json_written_before_the_record_was_typed_reads_whole(path: Path):
    state = json.loads(path.read_text())
    record = read_campaign(path.parent)
    assert json.loads(encode(record)) == as_written_now(state)
    assert record.points and all(isinstance(r, CampaignRun) for r in record.runs())


def test_the_first_campaign_json_without_its_later_keys_reads_with_their_defaults(tmp_path: Path):
    state = json.loads(STORED[0].read_text())
    del state["postcleanup_done"]
    for run in (r for p in state["points"] for r in p["runs"]):
        del run["warmup"]
    (tmp_path / CAMPAIGN_FILE).write_text(json.dumps(state))
    record = read_campaign(tmp_path)
    assert not record.postcleanup_done and not any(r.warmup for r in record.runs())


def test_a_campaign_json_with_a_value_of_the_wrong_type_is_refused_naming_the_file_and_key(tmp_path):
    state = json.loads(STORED[0].read_text())
    state["points"][1]["runs"][0]["value"] = "fast"
    (tmp_path / CAMPAIGN_FILE).write_text(json.dumps(state))
    with pytest.raises(NetspecError) as refused:
        read_campaign(tmp_path)
    assert str(refused.value) == (f"{tmp_path}/campaign.json: not a campaign record: "
                                  "Expected `float | null`, got `str` - at `$.points[1].runs[0].value`")
    (tmp_path / CAMPAIGN_FILE).write_text(json.dumps({**state, "format": 2}))
    with pytest.raises(NetspecError, match=r"campaign\.json has format 2; this netspec reads up to 1"):
        read_campaign(tmp_path)
    (tmp_path / CAMPAIGN_FILE).write_text("{cut")
    with pytest.raises(NetspecError) as refused:
        read_campaign(tmp_path)
    assert str(refused.value).startswith(f"{tmp_path}/campaign.json: not a JSON object")


def test_a_campaign_record_written_reads_back_as_it_was(tmp_path: Path):
    shutil.copy(STORED[0], tmp_path / CAMPAIGN_FILE)
    record = read_campaign(tmp_path)
    record.points.append(Point(params={"bad.code": 5}, label="bad.code=5", runs=[
        CampaignRun(id="r", path="/runs/r", status="ok", value=2, counted=True, differs=["x: 1 -> 2"])]))
    write_campaign(tmp_path, record)
    assert read_campaign(tmp_path) == record
    assert [p.name for p in tmp_path.iterdir()] == [CAMPAIGN_FILE]  # the temporary file replaced it
