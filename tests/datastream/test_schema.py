"""One declared stream record schema (datastream/schema.py): what the writer writes is each
kind's declared form, item by item; both reader paths (records, and the merge's columns,
compiled and not) read each item from where the declaration puts it; the merge's integer
columns are the declaration's; and docs/stream-format.md's tables say the same."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgpack
import msgspec
import pytest
from netspec.datastream import schema
from netspec.datastream.format import CLOSE, NAMESPACE, TRIGGER
from netspec.datastream.instrument import Datastreams
from netspec.datastream.reader import StreamReader
from netspec.datastream.records import MISSING
from netspec.datastream.schema import ENTITY_RECORDS, INT_ITEMS, STREAM_RECORDS, at, items, required
from netspec.datastream.writer import StreamConfig, StreamInfo

DOCS = Path(__file__).parent.parent.parent / "docs" / "stream-format.md"


@pytest.fixture
def written(tmp_path: Path) -> Path:
    """A stream holding a record of every kind, written through the entities, then a
    ring stream's trigger and a clean close."""
    ds = Datastreams()
    event, interval = ds.event("K", "event", decoder="json"), ds.interval("K", "interval")
    counter, histogram = ds.counter("K", "counter"), ds.histogram("K", "histogram", 0, 10, 2)
    samples = ds.samples("K", "samples", ["a", "b"])
    operation = ds.operation("K", "operation")
    (path,) = ds.start([StreamConfig("s", enable=("K",), ring_chunks=2)], StreamInfo(tmp_path, component="c"),
                       exit_hooks=False)
    event.log(7)
    event.log(8, b'{"x": 1}')
    interval.end(9, 1_000)
    operation.ok(2_000, intended_ns=1_500)
    operation.timed_out(3_000, "no answer in 1 s")
    counter.add(3)
    counter.log()
    histogram.add(-1)
    histogram.add(4.5)
    histogram.log()
    samples.log([1, "two"], 2_000)
    ds.trigger("test")
    ds.stop()
    return path


def raw_records(path: Path) -> list[list[Any]]:
    with StreamReader(path) as reader:
        return [r for seq, chunk in reader.chunks() if seq is not None for r in chunk]


def kind_of(record: list[Any], kinds: dict[int, str]) -> type[msgspec.Struct]:
    return STREAM_RECORDS[record[0]] if record[0] in STREAM_RECORDS else ENTITY_RECORDS[kinds[record[0]]]


def test_every_record_the_writer_writes_has_its_kinds_declared_form(written: Path) -> None:
    records = raw_records(written)
    kinds = {r[at(schema.NamespaceRecord, "entity")]: r[at(schema.NamespaceRecord, "kind")]
             for r in records if r[0] == NAMESPACE}
    seen = set()
    for r in records:
        kind = kind_of(r, kinds)
        seen.add(kind)
        msgspec.convert(r, kind)  # raises if an item is not of its declared type
        assert required(kind) <= len(r) <= len(items(kind)), (kind.__name__, r)
    assert seen == {*ENTITY_RECORDS.values(), *(STREAM_RECORDS[i] for i in (NAMESPACE, TRIGGER, CLOSE))}
    (event, with_data) = [r for r in records if kinds.get(r[0]) == "event"]
    assert len(event) == required(schema.EventRecord)
    assert with_data[at(schema.EventRecord, "data")] == b'{"x": 1}'


def test_a_written_record_reads_back_item_by_item_in_both_reader_paths(written: Path) -> None:
    raw = [r for r in raw_records(written) if r[0] != NAMESPACE]
    with StreamReader(written) as reader:
        read = [r for r in reader if r.entity.name != "lost"]
        kinds = {e.id: e.kind for e in reader.entities.values()}
    assert len(read) == len(raw)
    for r, record in zip(raw, read, strict=True):
        kind = kind_of(r, kinds)
        named = dict(zip(items(kind), r, strict=False))
        assert record.ts == named["ts"]
        if kind is schema.EventRecord:
            data = named.get("data")
            assert (record.tag, record.value) == (named["tag"], None if data is None else {"x": 1})
        elif kind is schema.IntervalRecord:
            assert (record.tag, record.start, record.value) == (named["tag"], named["start"],
                                                                named["ts"] - named["start"])
        elif kind is schema.OperationRecord:
            assert (record.tag, record.start) == (named["outcome"], named["start"])
            assert record.value == {"outcome": schema.OUTCOMES[named["outcome"]], "lag_ns": named["lag"],
                                    "latency_ns": named["ts"] - named["start"], "cause": named.get("cause")}
        elif kind is schema.CounterRecord:
            assert record.value == named["total"]
        elif kind is schema.HistogramRecord:
            assert record.value == {"counts": named["counts"], "sum": named["sum"]}
        elif kind is schema.SamplesRecord:
            assert record.value == dict(zip(["a", "b"], named["values"], strict=True))
        else:
            assert record.value == {k: v for k, v in named.items() if k not in ("id", "ts")}
    for compiled in (False, True):
        with StreamReader(written) as reader:
            columns = [c for seq, c in reader.columns(compiled) if seq is not None]
        ints = [row for c in columns for row in c.ints.tolist() if row[0] != NAMESPACE]
        assert len(ints) == len(raw)
        for r, row in zip(raw, ints, strict=True):
            assert len(row) == INT_ITEMS
            for k in range(INT_ITEMS):
                held = r[k] if k < len(r) and type(r[k]) is int else MISSING
                assert row[k] == held, (compiled, r, k)


def test_the_merges_integer_columns_are_where_the_declaration_puts_integers() -> None:
    assert INT_ITEMS == 5, "tag, an interval's start, an operation's lag"
    assert at(schema.OperationRecord, "outcome") == at(schema.EventRecord, "tag"), "outcome in the tag column"
    assert at(schema.OperationRecord, "lag") < INT_ITEMS
    assert at(schema.EventRecord, "tag") == at(schema.IntervalRecord, "tag"), "one tag column for both"
    assert at(schema.IntervalRecord, "start") < INT_ITEMS and at(schema.CounterRecord, "total") < INT_ITEMS

    class WiderInterval(msgspec.Struct, array_like=True):
        id: int
        ts: int
        tag: int
        start: int
        end_cpu: int

    assert schema.int_items([*ENTITY_RECORDS.values(), WiderInterval]) == 5, "a field added is a column"


def test_the_header_the_writer_writes_has_every_declared_key_of_its_type(written: Path) -> None:
    with StreamReader(written) as reader:
        header = reader.header
        assert not [w for w in reader.warnings if "header" in w]
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(written.read_bytes())
    on_disk = unpacker.unpack()
    assert list(on_disk) == list(schema.HEADER_ITEMS), "every key, in the declaration's order"
    assert msgspec.convert(on_disk, schema.Header) == header
    assert (header.stream, header.component, header.mode, header.ring_chunks) == ("s", "c", "ring", 2)


def test_the_format_documents_name_every_item_as_the_declaration_does() -> None:
    text = DOCS.read_text()
    documented = {}  # a Records table's first cell -> the longest record its second cell gives
    for line in text[text.index("## Records"):].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) > 1 and (forms := re.findall(r"`\[([^\]]*)\]`", cells[1])):
            documented[cells[0].strip("`")] = max(([i.strip() for i in f.split(",")] for f in forms), key=len)
    for eid, kind in STREAM_RECORDS.items():
        assert documented[str(eid)] == [str(eid), *items(kind)[1:]], kind.__name__
    for name, kind in ENTITY_RECORDS.items():
        assert documented[name] == list(items(kind)), name
    header = text[text.index("### Header"):text.index("### Chunk")]
    rows = re.findall(r"^\| ([^|]+) \|", header, re.MULTILINE)
    keys = {k for row in rows for k in re.findall(r"`(\w+)`", row)}
    assert keys == set(schema.HEADER_ITEMS)
