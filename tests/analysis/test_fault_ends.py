"""A fault's end from run.json's records alone (analysis/faultaudit.py): a partition's is
its last direction's, each ended by its own `for` or by the first heal of that direction
after it; a heal that covers only some directions leaves it lasting."""

from netspec.analysis.faultaudit import direction_end, fault_end, fault_line
from netspec.protocol.runrecord import FaultPart, FaultRecord

MS = 1_000_000


def partition(index: int, kind: str, parts: list[tuple[str, str, int]], **given) -> FaultRecord:
    return FaultRecord(index=index, kind=kind, host=parts[0][0], target=parts[0][1],
                       done_ns=max(p[2] for p in parts),
                       parts=[FaultPart(host=h, peer=p, done_ns=at) for h, p, at in parts], **given)


def test_a_partitions_end_is_its_last_directions_heal():
    isolate = partition(0, "partition", [("a", "b", 10 * MS), ("b", "a", 11 * MS), ("a", "c", 12 * MS),
                                        ("c", "a", 10 * MS)])
    one_way = partition(1, "heal", [("a", "b", 50 * MS), ("b", "a", 51 * MS)])
    rest = partition(2, "heal", [("a", "c", 80 * MS), ("c", "a", 79 * MS)])
    faults = [isolate, one_way, rest]
    assert direction_end(faults, isolate, ("b", "a")).at_ns == 51 * MS
    assert direction_end(faults, isolate, ("a", "c")).by == 2
    end = fault_end(faults, isolate)
    assert (end.at_ns, end.by) == (80 * MS, 2)
    assert fault_end(faults[:2], isolate) is None  # a -> c never healed: it lasted to the run's end
    # a heal done before a direction's cut does not end it
    early = partition(3, "heal", [("c", "a", 5 * MS)])
    assert direction_end([isolate, early], isolate, ("c", "a")) is None


def test_a_fault_aimed_at_a_role_says_the_role_and_a_partition_its_directions():
    chosen = partition(0, "partition", [("n2", "n1", 3 * MS), ("n1", "n2", 4 * MS)], role="leader",
                       planned_ns=0, late_ns=4 * MS, phase="run", after_s=2.0)
    assert fault_line(chosen).startswith("fault 0 partition n2 | n1 (run+2s, role leader): done 4.0 ms "
                                         "after its instant, its last of 2 directions")
    vacant = FaultRecord(index=1, kind="kill", target="", host="", role="spare", phase="run", after_s=1.0,
                         error="not done: no component held role 'spare' as its instant came")
    assert fault_line(vacant) == ("fault 1 kill ? (host ?, at run+1s, role spare): not done: no component "
                                  "held role 'spare' as its instant came")
