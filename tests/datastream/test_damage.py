"""No byte string crashes the reader, `dump` or the merge: crafted chunks with valid CRCs around
contents of the wrong form, payloads that fit no decoder, damaged headers, zeroed files and
mutated real streams each cost their own records, counted and said, never the file or the run.
The compiled scanner reads no byte past a body's end (checked with numba's bounds checks on)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from netspec.analysis.narrate import narrate
from netspec.analysis.resultset import merge_run
from netspec.analysis.timeline import merge_files
from netspec.datastream.chunkfile import ChunkFile
from netspec.datastream.format import HEADER_MAGIC, SYNC, chunk_crc
from netspec.datastream.instrument import Datastreams
from netspec.datastream.reader import StreamReader, read_streams
from netspec.datastream.schema import Header
from netspec.datastream.writer import StreamConfig, StreamInfo
from netspec.protocol.errors import StreamError
from support import ns_control

_encode = msgspec.msgpack.encode
T0 = 1_700_000_000_000_000_000
EXAMPLES = settings(max_examples=60, deadline=timedelta(seconds=5), derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def frame(seq: int, records: list[Any] | bytes, count: int | None = None) -> bytes:
    """A chunk whose CRC is right, whatever its body holds."""
    body = records if isinstance(records, bytes) else _encode(records)
    count = len(records) if count is None else count
    return SYNC + _encode(seq) + _encode(count) + _encode(chunk_crc(seq, count, body)) + _encode(body)


def header(**changes: Any) -> bytes:
    h = {"magic": HEADER_MAGIC, "version": [1, 0], "stream": "s", "run": "r", "host": "h",
         "component": "c", "pid": 7, "created_ns": T0, "mode": "normal", "ring_chunks": 0,
         "chunk_records": 100}
    return _encode({**h, **changes})


NAMESPACE = [[0, T0, 16, "event", "T", "tick", "", None, None],
             [0, T0, 17, "event", "T", "json", "", "json", None],
             [0, T0, 18, "interval", "T", "span", "", None, None],
             [0, T0, 19, "histogram", "T", "hist", "", None, {"lo": 0, "hi": 10, "buckets": 2}],
             [0, T0, 20, "samples", "T", "node", "", None, {"fields": ["a", "b"]}],
             [0, T0, 21, "counter", "T", "count", "", None, None]]
CLOSE = [3, T0 + 99, 0, 0, 0]
STORED_RUN = Path(__file__).parent.parent / "data" / "runs" / "stimulus-response" / "20261121T181343Z-23d1a4"


def crafted(path: Path, *chunks: list[Any] | bytes, head: bytes | None = None) -> Path:
    path.write_bytes((head or header()) + b"".join(frame(i, c) for i, c in enumerate(chunks, 1)))
    return path


def read_every_way(path: Path, tmp: Path) -> StreamReader | None:
    """Read `path` as dump, as the merge's columns (both decoders) and through the merge;
    returns the record-by-record reader, or None if the header is unreadable (StreamError,
    the only error allowed), after checking the merge leaves that file out and says so."""
    try:
        with StreamReader(path) as reader:
            lines = list(narrate([reader], reader))
    except StreamError:
        counts = merge_files({"h": [path]}, {}, tmp / "merged")
        assert any("not merged" in w for w in counts.warnings)
        return None
    assert lines
    for compiled in (False, True):
        with StreamReader(path) as other:
            for _ in other.columns(compiled):
                pass
        counts = merge_files({"h": [path]}, {}, tmp / "merged", compiled=compiled)
        assert pq.read_table(tmp / "merged" / "events.parquet").num_rows == counts.records
    return reader


def lost_rows(tmp: Path) -> int:
    table = pq.read_table(tmp / "merged" / "events.parquet", columns=["entity", "data"]).to_pylist()
    return sum(msgspec.json.decode(r["data"])["records"] or 0 for r in table if r["entity"] == "DS/lost")


# The regressions the independent fuzz found, one by one.

def test_a_chunk_marker_appended_to_a_stream_costs_nothing_but_is_said(tmp_path: Path) -> None:
    path = crafted(tmp_path / "s.c.1.ds", NAMESPACE, [[16, T0 + 1, 5]], [CLOSE])
    path.write_bytes(path.read_bytes() + SYNC)
    reader = read_every_way(path, tmp_path)
    assert reader is not None
    assert [r.tag for r in StreamReader(path) if r.entity.name == "tick"] == [5]
    assert any("the rest of the file (7 bytes) is unreadable" in w for w in reader.warnings)


def test_a_flipped_bit_in_the_header_version_costs_only_the_header(tmp_path: Path) -> None:
    path = crafted(tmp_path / "s.c.1.ds", NAMESPACE, [[16, T0 + 1, 5]], [CLOSE])
    data = bytearray(path.read_bytes())
    at = data.find(b"version") + len(b"version")  # the fixarray [1, 0] after the key
    data[at] ^= 0x80
    path.write_bytes(bytes(data))
    reader = read_every_way(path, tmp_path)
    assert reader is not None
    assert any("the header is damaged (bad version" in w for w in reader.warnings)
    assert [r.tag for r in StreamReader(path) if r.entity.name == "tick"] == [5]


@pytest.mark.parametrize("created", [1.5, "x", [1], None, True, -1])
def test_a_header_key_of_the_wrong_type_is_ignored_and_said(tmp_path: Path, created: Any) -> None:
    path = crafted(tmp_path / "s.c.1.ds", NAMESPACE, [[16, T0 + 1, 5]], [CLOSE],
                   head=header(created_ns=created))
    reader = read_every_way(path, tmp_path)
    assert reader is not None and reader.header.created_ns == 0, "as a header that leaves it out"
    assert any("the header's created_ns not of their kind: ignored" in w for w in reader.warnings)


def test_a_header_of_keys_of_the_wrong_type_is_said_and_every_reader_sees_the_same_typed_header(
        tmp_path: Path) -> None:
    odd = crafted(tmp_path / "s.c.1.ds", NAMESPACE, [[16, T0 + 1, 5]], [CLOSE],
                  head=header(component=5, host=None, pid="7", created_ns=1.5, run=["r"]))
    good = crafted(tmp_path / "t.c.2.ds", NAMESPACE, [[16, T0 + 2, 6]], [CLOSE], head=header(stream="t"))
    expected = Header(HEADER_MAGIC, [1, 0], "s", pid=0, created_ns=0, mode="normal", ring_chunks=0,
                      chunk_records=100)
    with ChunkFile(odd) as chunks, StreamReader(odd) as reader:
        assert chunks.header == reader.header == expected and not reader.header_damaged
        assert [w.partition(": ")[2] for w in reader.warnings] == [
            "the header's component, created_ns, host, pid, run not of their kind: ignored"]
        assert all(r.source.header == expected for r in reader)
    readers: list[StreamReader] = []
    lines = list(narrate(readers, read_streams([odd, good], readers)))
    assert lines[:2] == ["s.c.1.ds: stream 's' of a process (pid ?) on host ?, run ?",
                         "  format 1.0, clock ?, normal, created 1970-01-01 00:00:00 UTC"]
    assert any(line.split()[1:3] == ["?/?", "T/tick"] for line in lines), "its records name it as its header"
    assert any(line.split()[1:3] == ["h/c", "T/tick"] for line in lines)
    counts = merge_files({"h": [odd, good]}, {}, tmp_path / "merged")
    assert any("the header's component, created_ns, host, pid, run" in w for w in counts.warnings)
    rows = pq.read_table(tmp_path / "merged" / "events.parquet", columns=["stream", "component"]).to_pylist()
    assert {(r["stream"], r["component"]) for r in rows} == {("s", ""), ("t", "c")}


def test_a_header_whose_map_has_a_list_for_a_key_costs_only_the_header(tmp_path: Path) -> None:
    path = crafted(tmp_path / "s.c.1.ds", NAMESPACE, [[16, T0 + 1, 5]], [CLOSE], head=b"\x81\x91\x01\x02")
    reader = read_every_way(path, tmp_path)
    assert reader is not None and any("the header is damaged (no header)" in w for w in reader.warnings)


def test_records_not_of_their_kinds_form_are_skipped_counted_and_said(tmp_path: Path) -> None:
    bad = [[16], [16, "late"], [16, -5, 1], [18, T0, 1], [18, T0, 1, "start"], [19, T0, [1, 2], 3],
           [19, T0, "counts", 3], [20, T0, 7], [21, T0, "ten"], [3, T0, "x"], [1, T0, -1, "r"], 5,
           [0, T0, 3, "event", "T", "hijack", "", None, None], [0, T0, 30, "histogram", "T", "h", "", None,
                                                                  {"lo": "a"}], [0, T0]]
    good = [[16, T0 + 1, 1], [18, T0 + 2, 2, T0], [19, T0 + 3, [1, 2, 3, 4], 10], [20, T0 + 4, [1, "x"]],
            [21, T0 + 5, 2.5]]
    path = crafted(tmp_path / "s.c.1.ds", NAMESPACE, bad + good, [CLOSE])
    reader = read_every_way(path, tmp_path)
    assert reader is not None
    assert reader.records_lost == len(bad)
    assert any(f"lost {len(bad)} records: {len(bad)} record(s) of chunk 2 not of their kind's form" in w
               for w in reader.warnings)
    assert reader.closed_cleanly is True  # a close record of the wrong form is not the clean close
    with StreamReader(path) as again:
        kept = [(r.entity.name, r.value) for r in again if r.entity.group == "T"]
    assert kept == [("tick", None), ("span", 2), ("hist", {"counts": [1, 2, 3, 4], "sum": 10}),
                    ("node", {"a": 1, "b": "x"}), ("count", 2.5)]
    # The merge keeps the same records and counts the same loss.
    for compiled in (False, True):
        counts = merge_files({"h": [path]}, {}, tmp_path / "merged", compiled=compiled)
        assert lost_rows(tmp_path) == len(bad), compiled
        assert any(f"{len(bad)} record(s)" in w for w in counts.warnings)


@pytest.mark.parametrize("decoder,payloads", [
    ("json", [b"{not json", b"\xff\xfe", 5, b"[1, 2"]),
    ("utf8", [b"\xff\xfe\xfd", b"\xc3"]),
    ("struct:>IQ", [b"short", b"", 3, b"\x00" * 20])])
def test_event_data_that_fits_no_decoder_is_kept_raw_counted_and_said(
        tmp_path: Path, decoder: str, payloads: list[Any]) -> None:
    ds = Datastreams()
    event = ds.event("T", "data", decoder=decoder)
    (path,) = ds.start([StreamConfig("s", enable=("T",))], StreamInfo(tmp_path / "h", component="c"),
                       exit_hooks=False)
    for i, payload in enumerate(payloads):
        event.log(i, payload)
    ds.stop()
    reader = read_every_way(path, tmp_path)
    assert reader is not None
    with StreamReader(path) as again:
        values = [r.value for r in again if r.entity.name == "data"]
        again.finish()
    assert values == payloads  # kept raw
    said = f"T/data: the data of {len(payloads)} event(s) did not fit decoder {decoder!r} (first: "
    assert any(said in w for w in again.warnings), again.warnings
    counts = merge_files({"h": [path]}, {}, tmp_path / "merged")
    assert any(said in w for w in counts.warnings)
    rows = pq.read_table(tmp_path / "merged" / "events.parquet").to_pylist()
    assert len([r for r in rows if r["entity"] == "T/data"]) == len(payloads)


def test_dump_shows_data_that_fits_no_decoder_raw_and_says_so(tmp_path: Path) -> None:
    ds = Datastreams()
    event = ds.event("T", "data", decoder="json")
    (path,) = ds.start([StreamConfig("s", enable=("T",))], StreamInfo(tmp_path, component="c"),
                       exit_hooks=False)
    event.log(1, b'{"ok": 1}')
    event.log(2, b"{not json")
    ds.stop()
    done = ns_control("dump", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "tag 1  {'ok': 1}" in done.stdout and "tag 2  b'{not json'" in done.stdout
    said = "T/data: the data of 1 event(s) did not fit decoder 'json' (first: JSONDecodeError: "
    assert said in done.stderr


def test_a_zeroed_or_emptied_file_is_left_out_of_the_merge_and_said(tmp_path: Path) -> None:
    good = crafted(tmp_path / "s.good.1.ds", NAMESPACE, [[16, T0 + 1, 5]], [CLOSE])
    zeroed = tmp_path / "s.zero.2.ds"
    zeroed.write_bytes(bytes(len(good.read_bytes())))
    empty = tmp_path / "s.empty.3.ds"
    empty.write_bytes(b"")
    counts = merge_files({"h": [good, zeroed, empty]}, {}, tmp_path / "merged")
    assert counts.records == 2  # the good file's tick and close, and nothing else
    assert sum(f"{p}: not a netspec datastream" in w for w in counts.warnings for p in (zeroed, empty)) == 2


def test_a_run_whose_clock_stream_is_zeroed_still_merges_and_says_so(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(STORED_RUN / "run.json", run / "run.json")  # hosts a (the clock reference) and b
    for host in ("a", "b"):
        streams = run / "hosts" / host / "streams"
        streams.mkdir(parents=True)
        crafted(streams / f"s.c{host}.1.ds", NAMESPACE, [[16, T0 + 1, 5]], [CLOSE])
    zeroed = run / "hosts" / "b" / "streams" / "clksync.netspecd.1.ds"
    zeroed.write_bytes(bytes(4096))
    result = merge_run(run)
    assert result.records == 4  # each host's tick and close
    assert any(f"{zeroed}: not a netspec datastream" in w for w in result.warnings), result.warnings
    summary = json.loads((run / "merged" / "summary.json").read_text())
    assert summary["warnings"] == result.warnings


def test_chunk_markers_whose_bodies_each_span_the_rest_of_the_file_cost_linear_time(tmp_path: Path) -> None:
    """250,000 frames 16 bytes apart, each saying its body runs to the end of the 4 MB file:
    checking every one would CRC 500 GB; reading it takes about a second here."""
    size = 4_000_000
    frames = (SYNC + b"\x01\x01\x00\xc6" + (size - 16 * (i + 1)).to_bytes(4, "big") + b"\x00"
              for i in range(size // 16))
    path = tmp_path / "s.c.1.ds"
    path.write_bytes(header() + b"".join(frames))
    # Counted in this process's CPU time, which a machine busy with other work does not
    # stretch: checking every marker would take hours of it.
    started = time.process_time()
    with StreamReader(path) as reader:
        assert [r.entity.name for r in reader] == ["lost"]
    assert time.process_time() - started < 30
    assert "the rest of the file (4000000 bytes) is unreadable" in reader.warnings[0]


def test_a_chunk_that_says_more_records_than_it_holds_is_refused_before_allocating(tmp_path: Path) -> None:
    path = tmp_path / "s.c.1.ds"
    path.write_bytes(header() + frame(1, NAMESPACE) + frame(2, [[16, T0, 1]], count=2**31)
                     + frame(3, [CLOSE]))
    reader = read_every_way(path, tmp_path)
    assert reader is not None
    assert any("chunk 2 says 2147483648 records, more than its" in w for w in reader.warnings)


# Property tests: any content in valid frames, and any damage to a real stream.

INTS = st.sampled_from([0, 1, 2, 3, 16, 17, 18, 19, 20, 21, -1, 2**63 - 1, 2**63, 2**64 - 1, -2**63, T0])
LEAVES = INTS | st.floats(allow_nan=True) | st.none() | st.booleans() | st.text(max_size=4) \
    | st.binary(max_size=6) | st.sampled_from(["event", "interval", "counter", "histogram", "samples", "json",
                                               "utf8", "struct:>I", "struct:?", "fields", "lo", "buckets"])
KEYS = st.sampled_from(["lo", "hi", "buckets", "fields", "x"])
VALUES = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(KEYS, inner, max_size=3), max_leaves=8)
RECORDS = st.one_of(
    st.lists(VALUES, max_size=6).map(lambda r: [16 + len(r) % 6, T0, *r]),
    st.tuples(st.sampled_from([16, 17, 18, 19, 20, 21, 3, 1, 2]), st.sampled_from([T0, -1, 2**64 - 1]),
              st.lists(VALUES, max_size=4)).map(lambda t: [t[0], t[1], *t[2]]),
    st.tuples(INTS, st.sampled_from(["event", "interval", "counter", "histogram", "samples", "new"]),
              VALUES, st.sampled_from([None, "json", "utf8", "struct:>I", "struct:?", "a:b"])).map(
        lambda t: [0, T0, t[0], t[1], "T", "x", "", t[3], t[2]]),
    VALUES)
BODIES = st.one_of(st.lists(RECORDS, max_size=8).map(lambda rs: (NAMESPACE + rs, None)),
                   st.tuples(st.lists(RECORDS, max_size=6).map(_encode), st.integers(0, 8)).map(
                       lambda t: (t[0], t[1])),
                   st.tuples(st.binary(max_size=40), st.integers(0, 12)))
HEADERS = st.one_of(st.just({}), st.fixed_dictionaries({}, optional={
    "version": VALUES, "created_ns": VALUES, "mode": VALUES, "stream": VALUES, "component": VALUES,
    "parent_pid": VALUES}))


@settings(EXAMPLES)
@given(head=HEADERS, bodies=st.lists(BODIES, min_size=1, max_size=4),
       tail=st.sampled_from([b"", SYNC, SYNC + b"\xcf"]))
def test_any_contents_in_frames_with_valid_crcs_never_crash_the_reader_dump_or_merge(
        tmp_path: Path, head: dict[str, Any], bodies: list[tuple[Any, int | None]], tail: bytes) -> None:
    path = tmp_path / "s.c.1.ds"
    chunks = b"".join(frame(i, body, count) for i, (body, count) in enumerate(bodies, 1))
    path.write_bytes(header(**head) + chunks + tail)
    read_every_way(path, tmp_path)


@pytest.fixture(scope="module")
def real_stream(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real stream of every kind of record, as a program writes it."""
    ds = Datastreams()
    tick, data = ds.event("T", "tick"), ds.event("T", "data", decoder="json")
    span, count = ds.interval("T", "span"), ds.counter("T", "count")
    hist, node = ds.histogram("T", "hist", 0, 10, 4), ds.samples("T", "node", ["a", "b"])
    (path,) = ds.start([StreamConfig("s", enable=("T",), chunk_records=8)],
                       StreamInfo(tmp_path_factory.mktemp("real"), component="c"), exit_hooks=False)
    for i in range(40):
        tick.log(i)
        data.log(i, b'{"i": %d}' % i)
        span.start()
        span.end(i)
        count.add(i)
        count.log()
        hist.add(i % 12)
        hist.log()
        node.log([i, "x"])
    ds.stop()
    return path.read_bytes()


EDITS = st.sampled_from(["flip", "zero", "cut", "insert", "drop"])


@settings(EXAMPLES)
@given(edits=st.lists(st.tuples(st.integers(0, 1 << 16), EDITS, st.integers(0, 255)), min_size=1, max_size=4))
def test_a_real_stream_damaged_anywhere_never_crashes_the_reader_dump_or_merge(
        tmp_path: Path, real_stream: bytes, edits: list[tuple[int, str, int]]) -> None:
    data = bytearray(real_stream)
    for at, how, byte in edits:
        if not data:
            break
        at %= len(data)
        if how == "flip":
            data[at] ^= 1 << (byte % 8)
        elif how == "zero":
            data[at:at + byte] = bytes(len(data[at:at + byte]))
        elif how == "cut":
            del data[at:]
        elif how == "insert":
            data[at:at] = bytes([byte]) + SYNC[:byte % 8]
        else:
            del data[at:at + byte % 16 + 1]
    path = tmp_path / "s.c.1.ds"
    path.write_bytes(bytes(data))
    read_every_way(path, tmp_path)


SCANNER_CHECK = """
import sys, msgspec
from netspec.datastream.columns import scan, unpack
bodies = msgspec.msgpack.decode(open(sys.argv[1], 'rb').read())
for body, count in bodies:
    try:
        got = scan(body, count)
    except ValueError:
        got = None
    try:
        want = unpack(body, count)
    except ValueError:
        want = None
    assert (got is None) == (want is None), (body, count)
    if got is not None:
        assert (got.ints == want.ints).all() and (got.items == want.items).all() \\
            and (got.spans == want.spans).all(), (body, count)
print(len(bodies))
"""


def test_the_compiled_scanner_reads_no_byte_past_a_body_and_agrees_with_msgpack(
        tmp_path: Path, real_stream: bytes) -> None:
    """Every prefix of real bodies, and every byte of them replaced by each MessagePack type
    byte that carries a length, scanned with numba's bounds checks on (an out-of-bounds read
    raises there): refused or read exactly as msgpack's unpacker reads them."""
    records = [[16, T0, 1], [17, T0, 2, b"data" * 5], [19, T0, [1, 2, 3], 4.5], [20, T0, [1, "x", None]],
               [0, T0, 16, "event", "T", "tick", "", None, {"k": [1, 2]}]]
    body = _encode(records)
    lengths = [0xC4, 0xC5, 0xC6, 0xC7, 0xC8, 0xC9, 0xD9, 0xDA, 0xDB, 0xDC, 0xDD, 0xDE, 0xDF, 0xCA, 0xCB,
               0xCF, 0xD3, 0xD8, 0x9F, 0x8F, 0xBF, 0xC1]
    bodies = [(body[:n], len(records)) for n in range(len(body))]
    bodies += [(body[:i] + bytes([b]) + body[i + 1:], len(records))
               for i in range(len(body)) for b in lengths]
    cases = tmp_path / "bodies.msgpack"
    cases.write_bytes(_encode(bodies))
    env = {**os.environ, "NUMBA_BOUNDSCHECK": "1", "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    done = subprocess.run([sys.executable, "-c", SCANNER_CHECK, str(cases)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(len(bodies))
