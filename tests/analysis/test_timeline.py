"""The merge: synthetic streams from hosts with known clock offsets and drift land on the
true global time within their bounds, in time order; cross-host pairs and the causality
check; the Parquet files read back with DuckDB and pyarrow."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest
from netspec.analysis.ordering import merge_order
from netspec.analysis.resultset import open_tables, write_intervals
from netspec.analysis.timeline import merge_files
from netspec.clksync.fit import ClockFit, Exchanges, fit
from netspec.datastream.columns import MISSING, scan, unpack
from netspec.datastream.instrument import Datastreams
from netspec.datastream.writer import StreamConfig, StreamInfo
from netspec.protocol.runplan import PlanPair

T0 = 1_700_000_000_000_000_000  # before now: the files' own close records come last
SECOND = 1_000_000_000
# host -> (offset ns at T0, drift in ns per s): host time = global time + offset + drift * t
CLOCKS = {"a": (0, 0.0), "b": (3_000_000, 20_000.0), "c": (-41_000_000, -7_500.0)}


def host_time(host: str, global_ns: np.ndarray | int) -> np.ndarray | int:
    offset, drift = CLOCKS[host]
    return global_ns + offset + np.round(drift * (np.asarray(global_ns) - T0) / SECOND).astype(np.int64)


def exchanges(host: str, seconds: int, rng: random.Random) -> Exchanges:
    """Probe exchanges with reference a every 100 ms: 20-60 us each way."""
    rows = []
    for k in range(seconds * 10):
        g1 = T0 + k * SECOND // 10
        g2 = g1 + rng.randint(20_000, 60_000)
        g3 = g2 + 5_000
        g4 = g3 + rng.randint(20_000, 60_000)
        rows.append((int(host_time(host, g1)), g2, g3, int(host_time(host, g4)), True))
    return Exchanges.from_rows(rows)


def write_stream(directory: Path, host: str, records: list[tuple[str, int, int]]) -> Path:
    """A real stream file whose records carry the given host times: (entity, ts, tag)."""
    ds = Datastreams()
    entities = {name: ds.event("T", name) for name in {r[0] for r in records}}
    (path,) = ds.start([StreamConfig("t", enable=("T",), chunk_records=500)],
                       StreamInfo(directory, run="r", host=host, component=f"app_{host}"), exit_hooks=False)
    stream = ds.streams[0]
    for name, ts, tag in records:
        stream.put((entities[name].id, ts, tag))
    ds.stop()
    return path


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    """Hosts a, b, c each log 3,000 events at known global times; b sends each to c."""
    tmp = tmp_path_factory.mktemp("merge")
    rng = random.Random(5)
    fits = {"a": ClockFit.identity("a"),
            **{h: fit(h, "a", exchanges(h, 40, rng)) for h in ("b", "c")}}
    truth = {}
    files = {}
    for host in CLOCKS:
        globals_ = np.sort(np.array([T0 + 5 * SECOND + rng.randrange(30 * SECOND) for _ in range(3000)]))
        truth[host] = globals_
        local = host_time(host, globals_)
        records = [("tick", int(t), i) for i, t in enumerate(local)]
        if host == "b":
            records += [("send", int(host_time("b", g)), i) for i, g in enumerate(globals_[:1000])]
        if host == "c":
            sends = truth["b"][:1000]
            records += [("recv", int(host_time("c", g + 50_000)), i) for i, g in enumerate(sends)]
        records.sort(key=lambda r: r[1])
        files[host] = [write_stream(tmp / host, host, records)]
    return files, fits, truth


@pytest.fixture(scope="module", params=[False, True], ids=["unpacked", "compiled"])
def merged(streams, request, tmp_path_factory):
    """The streams merged by msgpack's unpacker and numpy (a small merge) and by the compiled
    scanner, conversion and ordering (a large one)."""
    files, fits, truth = streams
    out = tmp_path_factory.mktemp("merged")
    counts = merge_files(files, fits, out, compiled=request.param)
    return out, truth, counts


def test_a_small_merge_and_a_compiled_one_write_the_same_rows(streams, tmp_path):
    files, fits, _ = streams
    for compiled in (False, True):
        merge_files(files, fits, tmp_path / str(compiled), compiled=compiled)
    assert pq.read_metadata(tmp_path / "False" / "events.parquet").num_rows == 11003
    for table in ("events", "samples"):
        unpacked, compiled = (pq.read_table(tmp_path / str(c) / f"{table}.parquet") for c in (False, True))
        # Row by row: the dictionary columns' chunks may be laid out differently.
        assert unpacked.to_pydict() == compiled.to_pydict(), table


def test_every_event_lands_on_its_true_global_time_within_its_bound(merged):
    out, truth, counts = merged
    events = pq.read_table(out / "events.parquet")
    assert counts.warnings == [] and counts.late == 0
    assert np.all(np.diff(events["ts"].to_numpy()) >= 0), "one time-ordered timeline"
    for host in CLOCKS:
        ts, bound = (np.array(c) for c in zip(*duckdb.sql(
            f"SELECT ts, bound_ns FROM '{out / 'events.parquet'}' WHERE host = '{host}' "
            "AND entity = 'T/tick' ORDER BY tag").fetchall(), strict=True))
        assert len(ts) == 3000
        error = np.abs(ts - truth[host])
        assert np.all(error <= bound), host
        if host == "a":
            assert error.max() == 0 and bound.max() == 0
        else:
            # Offsets of milliseconds and drifts of up to 20 ppm are taken out to within microseconds.
            assert error.max() < 20_000 and np.median(bound) < 30_000, host


def test_cross_host_pairs_recover_the_transmission_time_and_pass_the_causality_check(merged):
    out, _, _ = merged
    total, (check,) = write_intervals(open_tables(out), out, {"b_to_c": PlanPair("T/send", "T/recv")})
    assert total == 1000 and check.matched == 1000 and check.violations == 0
    pairs = duckdb.sql("SELECT start_host, end_host, duration_ns, bound_ns "
                       f"FROM '{out / 'intervals.parquet'}' WHERE name = 'b_to_c'").fetchnumpy()
    assert set(pairs["start_host"]) == {"b"} and set(pairs["end_host"]) == {"c"}
    assert np.all(np.abs(pairs["duration_ns"] - 50_000) <= pairs["bound_ns"])
    assert abs(np.median(pairs["duration_ns"]) - 50_000) < 20_000


def test_a_receive_before_its_send_is_reported_with_how_far(merged):
    out, _, _ = merged
    # Pairing backwards (each receive as the start) makes every "end" land before its "start".
    _, (check,) = write_intervals(open_tables(out), out, {"backwards": PlanPair("T/recv", "T/send")})
    assert check.violations == check.matched == 1000
    assert 30_000 < check.worst_ns < 80_000
    assert "1000 of 1000 ends land before their starts" in check.text()


@pytest.mark.parametrize("runs", [1, 2, 4, 9])
def test_the_merge_of_sorted_runs_is_a_stable_sort(runs):
    rng = np.random.default_rng(runs)
    sizes = rng.integers(0, 3000, runs)
    sizes[rng.integers(0, runs)] = 0  # an empty run
    # Few distinct times: many equal ones, within a run and across runs.
    ts = np.concatenate([np.sort(rng.integers(0, 500, n)) for n in sizes]).astype(np.int64)
    order = merge_order(ts, np.cumsum(sizes))
    np.testing.assert_array_equal(order, np.argsort(ts, kind="stable"))


def test_the_scanner_reads_every_kind_of_value_the_writer_can_write():
    import msgspec
    records = [[16, T0, 1], [17, T0 + 1, None, {"k": [1.5, "s", b"\x00" * 70000, None, True]}],
               [18, T0 + 2, -5, T0 - 9], [19, T0 + 3, [1, 2.5, "x" * 300]],
               [0, 7, 20, "event", "G", "n", "", None, {}]]
    body = msgspec.msgpack.encode(records)
    for read in (scan, unpack):
        cols = read(body, len(records))
        assert cols.ints[:, 0].tolist() == [16, 17, 18, 19, 0]
        assert cols.ints[2, 2:4].tolist() == [-5, T0 - 9]
        assert (cols.ints[2, 4:] == MISSING).all()  # the record has no more items
        assert [msgspec.msgpack.decode(body[a:b]) for a, b in cols.spans] == records
        with pytest.raises(ValueError):
            read(body[:-3], len(records))
        with pytest.raises(ValueError):
            read(body, len(records) + 1)


def test_slips_inside_a_file_are_put_in_order_and_records_later_than_the_slack_are_counted(tmp_path):
    # 400k records per host, 10 us apart, two to a time: more than the merge holds at once.
    # Every 1000th pair of a's is logged in the wrong order (a slip of 10 us, within the
    # slack); three of a's come last with times 3.5 s back (later than the slack allows).
    n, step = 400_000, 10_000
    times = T0 + (np.arange(n) // 2) * step
    a = [("tick", int(t), i) for i, t in enumerate(times)]
    for i in range(1000, n - 2, 1000):
        a[i], a[i + 2] = a[i + 2], a[i]
    a += [("late", T0 + SECOND // 2 + k, k) for k in range(3)]
    b = [("tick", int(t), i) for i, t in enumerate(times)]
    files = {"a": [write_stream(tmp_path / "a", "a", a)], "b": [write_stream(tmp_path / "b", "b", b)]}
    counts = merge_files(files, {h: ClockFit.identity(h) for h in files}, tmp_path / "merged")
    events = pq.read_table(tmp_path / "merged" / "events.parquet", columns=["ts", "host", "entity", "tag"])
    entity = events["entity"].to_pylist()
    assert entity.count("T/tick") == 2 * n and entity.count("T/late") == 3
    assert counts.late == 3
    assert any("3 records came more than 1 s after later ones" in w for w in counts.warnings)
    on_time = [(ts, host, tag) for ts, host, e, tag in zip(*events.to_pydict().values(), strict=True)
               if e == "T/tick"]
    assert all(x[0] <= y[0] for x, y in itertools.pairwise(on_time)), "slips are put in order"
    for host, logged in (("a", a[:n]), ("b", b)):
        # Records of one file with equal times keep the order they were logged in.
        assert [tag for _, h, tag in on_time if h == host] == [
            tag for _, _, tag in sorted(logged, key=lambda r: r[1])]


def test_a_damaged_chunk_is_a_lost_record_on_the_timeline(tmp_path):
    path = write_stream(tmp_path, "a", [("tick", T0 + i, i) for i in range(2000)])
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    counts = merge_files({"a": [path]}, {"a": ClockFit.identity("a")}, tmp_path / "merged")
    events = pq.read_table(tmp_path / "merged" / "events.parquet", columns=["entity", "data"]).to_pylist()
    lost = [e["data"] for e in events if e["entity"] == "DS/lost"]
    assert len(lost) == 1 and json.loads(lost[0])["records"] == 500
    assert sum(e["entity"] == "T/tick" for e in events) == 1500
    assert any("lost 500 records" in w for w in counts.warnings)


def test_a_file_that_is_no_stream_at_all_is_left_out_of_the_merge_not_the_run(tmp_path):
    good = write_stream(tmp_path, "a", [("tick", T0 + i, i) for i in range(10)])
    junk = tmp_path / "junk.x.1.ds"
    junk.write_bytes(b"not a stream at all")
    counts = merge_files({"a": [good, junk]}, {"a": ClockFit.identity("a")}, tmp_path / "merged")
    entity = pq.read_table(tmp_path / "merged" / "events.parquet", columns=["entity"])["entity"].to_pylist()
    assert entity.count("T/tick") == 10
    assert any(w.startswith(f"{junk}: not a netspec datastream") and w.endswith(": not merged")
               for w in counts.warnings)
