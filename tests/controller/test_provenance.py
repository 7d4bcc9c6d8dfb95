"""What differs between runs, said before they are compared or counted together."""

import copy
import json

import pytest
from netspec.analysis.points import UnlikeRuns, check_repetitions
from netspec.analysis.provenance import differences
from support import REPO

STORED = REPO / "tests" / "data" / "runs" / "stimulus-response" / "20261121T181343Z-23d1a4" / "run.json"


def stored():
    record = json.loads(STORED.read_text())
    record["programs"] = {"/exp/stimulus.py": {"sha256": "fedcba9876543210" * 4,
                                               "copy": "programs/0-stimulus.py"}}
    return record


def changed(record):
    after = copy.deepcopy(record)
    client = next(c for c in after["plan"]["components"] if c["name"] == "client")
    client["params"]["count"] = 500
    after["plan"]["hosts"][1]["ssh"] = "alice@10.0.0.3"
    after["versions"]["netspec"] = "9.9"
    after["programs"]["/exp/stimulus.py"]["sha256"] = "0123456789abcdef"
    return after


def test_differences_name_each_param_host_program_and_version_that_changed():
    before = stored()
    after = changed(before)
    assert differences(before, before) == []
    assert differences(before, after) == [
        "client.count: 2000 -> 500",
        "host b: local -> alice@10.0.0.3",
        "program /exp/stimulus.py sha256: fedcba987654 -> 0123456789ab",
        f"netspec version: {before['versions']['netspec']} -> 9.9",
    ]


def test_a_campaign_refuses_to_count_runs_that_differ_as_repetitions_of_one_point(tmp_path):
    before = stored()
    runs = []
    for i, record in enumerate([before, before, changed(before)]):
        (tmp_path / str(i)).mkdir()
        (tmp_path / str(i) / "run.json").write_text(json.dumps(record))
        runs.append({"id": f"run{i}", "path": str(tmp_path / str(i)), "counted": True})
    check_repetitions({"label": "client.size=64"}, runs[:2])
    with pytest.raises(UnlikeRuns, match=r"^client.size=64: runs run0 and run2 are not repetitions of one "
                                            r"experiment: client.count: 2000 -> 500; host b: local"):
        check_repetitions({"label": "client.size=64"}, runs)
