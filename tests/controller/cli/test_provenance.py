"""What differs between runs, said before they are compared or counted together."""

import copy
import json

import pytest
from netspec.analysis.points import UnlikeRuns, check_repetitions
from netspec.analysis.provenance import differences
from netspec.controller.cli.runs import run_differences
from netspec.protocol.campaignrecord import CampaignRun
from netspec.protocol.runrecord import RunRecord, decode
from support import REPO

STORED = REPO / "tests" / "data" / "runs" / "stimulus-response" / "20261121T181343Z-23d1a4" / "run.json"


def stored():
    record = json.loads(STORED.read_text())
    record["programs"] = {"/exp/stimulus.py": {"sha256": "fedcba9876543210" * 4,
                                               "copy": "programs/0-stimulus.py"}}
    return record


def typed(record) -> RunRecord:
    """A record as every reader has it: read through the run record's one reader."""
    return decode(json.dumps(record).encode(), "run.json")


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
    assert differences(typed(before), typed(before)) == []
    assert differences(typed(before), typed(after)) == [
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
        runs.append(CampaignRun(id=f"run{i}", path=str(tmp_path / str(i)), status="ok", counted=True))
    check_repetitions("client.size=64", runs[:2])
    with pytest.raises(UnlikeRuns, match=r"^client.size=64: runs run0 and run2 are not repetitions of one "
                                            r"experiment: client.count: 2000 -> 500; host b: local"):
        check_repetitions("client.size=64", runs)


def test_differences_name_the_experiments_name_services_streams_and_analysis():
    before = stored()
    before["plan"].update({
        "streams": {"stim": {"enable": ["STIM"], "chunk_records": 4096}},
        "camp": {"interval_ms": 10},
        "analysis": {"pairs": {"to_server": {"start": "STIM/send", "end": "STIM/stimulus", "match": "all"}},
                     "graph": {"rtt": {"filter": "select", "input": "intervals"}}, "decoders": []}})
    after = copy.deepcopy(before)
    after["plan"]["experiment"] = "stimulus-response-2"
    after["plan"]["clock"]["interval_ms"] = 200.0
    after["plan"]["camp"]["interval_ms"] = 100
    after["plan"]["streams"]["stim"]["enable"] = ["STIM", "LINK"]
    after["plan"]["analysis"]["pairs"]["to_server"]["match"] = "first"
    after["plan"]["analysis"]["graph"]["rtt"]["input"] = "events"
    after["plan"]["analysis"]["decoders"] = ["mine:decode"]
    changed_keys = [d.split(":")[0] for d in differences(typed(before), typed(after))]
    assert changed_keys == ["experiment", "services clksync", "services camp", "stream stim",
                            "analysis pair to_server", "analysis graph rtt", "analysis decoders"]
    first = differences(typed(before), typed(after))[0]
    assert first == "experiment: stimulus-response -> stimulus-response-2"


def test_a_rerun_of_the_copies_of_its_programs_at_other_paths_is_no_difference_but_their_content_is():
    source, filters = "/exp/stimulus.py", "/exp/mine.py"
    before = stored()
    before["programs"] = {p: {"sha256": f"{i}" * 64, "copy": f"programs/{i}-{p.rpartition('/')[2]}"}
                          for i, p in enumerate((source, filters))}
    for comp in before["plan"]["components"]:
        comp["program"] = source
    before["plan"]["analysis"] = {"graph": {"mine": {"filter": f"{filters}:keep", "input": "events"}}}
    rerun = copy.deepcopy(before)  # `ns_control rerun` runs the first run's copies
    copies = {p: f"/runs/first/{kept['copy']}" for p, kept in before["programs"].items()}
    rerun["programs"] = {copies[p]: {**kept, "copy": kept["copy"]} for p, kept in before["programs"].items()}
    for comp in rerun["plan"]["components"]:
        comp["program"] = copies[source]
    rerun["plan"]["analysis"]["graph"]["mine"]["filter"] = f"{copies[filters]}:keep"
    assert differences(typed(before), typed(rerun)) == []
    rerun["programs"][copies[source]]["sha256"] = "a" * 64
    rerun["plan"]["analysis"]["graph"]["mine"]["filter"] = f"{copies[filters]}:other"
    assert differences(typed(before), typed(rerun)) == [
        "server program: sha256 000000000000 -> sha256 aaaaaaaaaaaa",
        "client program: sha256 000000000000 -> sha256 aaaaaaaaaaaa",
        'analysis graph mine: {"filter": "sha256 111111111111:keep", "input": "events"} -> '
        '{"filter": "sha256 111111111111:other", "input": "events"}']


def run_on(tmp_path, name, record, **host_facts):
    """A run directory holding `record`, its hosts' daemons having said `host_facts` (a
    daemon's facts.json, with the given facts changed)."""
    run = tmp_path / name
    (run / "hosts").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps(record))
    for host in record["hosts"]:
        facts = {"hostname": f"machine-{name}", "cpu_model": "Intel(R) Xeon(R) Processor", "cpu_count": 2,
                 "kernel": "6.18.44", "os": "Linux-6.18.44-x86_64", "memory_bytes": 25276502016,
                 "address": "127.0.0.1", **host_facts}
        (run / "hosts" / host).mkdir()
        (run / "hosts" / host / "facts.json").write_text(json.dumps(facts))
    return run


def test_report_says_first_that_the_hosts_cpu_cores_and_kernel_differ(tmp_path):
    a = run_on(tmp_path, "a", stored())
    b = run_on(tmp_path, "b", stored(), cpu_model="AMD EPYC 7763", cpu_count=64, kernel="6.1.0")
    assert run_differences([a, b]) == [
        "b differs from a in 6 way(s):",
        "  host a cpu_model: Intel(R) Xeon(R) Processor -> AMD EPYC 7763",
        "  host a cpu_count: 2 -> 64",
        "  host a kernel: 6.18.44 -> 6.1.0",
        "  host b cpu_model: Intel(R) Xeon(R) Processor -> AMD EPYC 7763",
        "  host b cpu_count: 2 -> 64",
        "  host b kernel: 6.18.44 -> 6.1.0"]
    # Another machine's name and address alone are no difference in how the runs went.
    assert run_differences([a, run_on(tmp_path, "c", stored(), address="10.0.0.9")]) == []


def test_a_campaign_refuses_to_count_runs_on_unlike_hosts_as_repetitions(tmp_path):
    runs = [CampaignRun(id=name, path=str(run_on(tmp_path, name, stored(), **facts)), status="ok",
                        counted=True) for name, facts in (("a", {}), ("b", {"kernel": "6.1.0"}))]
    kernels = r"host a kernel: 6.18.44 -> 6.1.0; host b kernel: 6.18.44 -> 6.1.0$"
    with pytest.raises(UnlikeRuns, match=kernels):
        check_repetitions("client.size=64", runs)


def test_hosts_placed_otherwise_alike_are_said_on_one_line_and_a_container_s_own_names_are_no_difference():
    def fleet(cpus: float, run: str) -> dict:
        record = stored()
        record["hosts"] = {f"peers-{i}": {"placement": {
            "engine": "local", "node": "vm", "image": "netspec:1", "image_id": "sha256:" + "ab" * 32,
            "container_id": f"{run}{i}" * 8, "container": f"netspec-{run}-peers-{i}", "created": True,
            "network": f"netspec-{run}", "limits": {"cpus": cpus, "cap_add": ["NET_ADMIN"]},
            "cgroup": f"/docker/{run}{i}", "cgroup_version": 1}} for i in range(1, 6)}
        return record

    assert differences(typed(fleet(0.5, "a")), typed(fleet(0.5, "b"))) == []  # a repetition counts
    (said,) = differences(typed(fleet(0.5, "a")), typed(fleet(1.0, "b")))
    where = "docker engine local, node vm, image netspec:1 (abababababab), cpus {}, memory unlimited, " \
            "cap_add NET_ADMIN, cgroup v1"
    assert said == (f"hosts peers-1, peers-2, peers-3 and 2 more (5) placement: {where.format('0.5')} -> "
                    f"{where.format('1')}")
