"""The faults on the phase timeline: each drawn on its component's row (else its host's), and
those whose host is folded into a group's row counted in the markers' name, not dropped unsaid."""

from netspec.protocol.runrecord import FaultRecord, RunRecord
from netspec.web.faults import fault_traces

MS = 1_000_000


def record(*faults: FaultRecord) -> RunRecord:
    return RunRecord(format=1, id="r", experiment="e", status="ok", faults=list(faults))


def test_a_fault_on_a_folded_host_is_counted_in_the_markers_name():
    faults = (FaultRecord(index=0, kind="kill", target="x", host="web-01", done_ns=10 * MS),
              FaultRecord(index=1, kind="pause", target="y", host="a", done_ns=20 * MS, ended_ns=50 * MS),
              FaultRecord(index=2, kind="cpu", target="a", host="a", done_ns=30 * MS))
    traces = {t["name"]: t for t in fault_traces(record(*faults), ["a/y", "web (12 hosts)"], 0, 100 * MS)}
    markers = traces["fault (1 more on folded hosts: expand their group)"]
    assert markers["y"] == ["a/y", "a/y"]  # the pause on its component's row, the cpu on its host's
    band = traces["fault, to its end"]
    assert band["y"] == ["a/y", "a/y"] and band["x"] == [30.0, 70.0]  # to its end, to the run's


def test_unfolded_faults_are_named_plainly():
    traces = fault_traces(record(FaultRecord(index=0, kind="kill", target="y", host="a", done_ns=5)),
                          ["a/y"], 0, 100)
    assert [t["name"] for t in traces] == ["fault, to its end", "fault"]
