"""A select node's `where:` is a condition on a row, never a query, and the graph's DuckDB
connection reaches no file outside its result set."""

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from netspec.analysis.condition import check_where, confine


@pytest.mark.parametrize("where", [
    "tag < 3",
    "tag IN (1, 2) AND NOT name IS NULL OR value BETWEEN 1 AND 2",
    "CASE WHEN lower(name) LIKE 'stim%' THEN CAST(tag AS DOUBLE) ELSE 0 END > 0.5",
    "name GLOB 'STIM/*' AND abs(value) >= 1e3",
])
def test_a_condition_on_a_rows_columns_is_taken_as_it_is(where):
    assert check_where(where) == where


@pytest.mark.parametrize(("where", "said"), [
    ("(SELECT count(*) FROM read_text('/etc/shadow')) > 0", "subquery is not allowed"),
    ("EXISTS (SELECT 1 FROM read_csv('/etc/passwd'))", "subquery is not allowed"),
    ("tag IN (SELECT 1)", "subquery is not allowed"),
    ("1=1) UNION (SELECT 1", "is more than a condition"),
    ("1=1) ORDER BY (tag", "is more than a condition"),
    ("1=1); COPY (SELECT 1) TO '/tmp/x.csv'; SELECT (1", "does not parse: Only SELECT"),
    ("sum(tag) OVER () > 1", "window is not allowed"),
    ("list_filter([1], x -> x > 0) = [1]", "lambda is not allowed"),
    ("tag = $1", "more than a condition"),
    ("tag <", "does not parse"),
    ("", "is not an SQL condition"),
])
def test_anything_more_than_a_condition_is_refused_naming_what(where, said):
    with pytest.raises(ValueError, match=said.replace("(", r"\(")):
        check_where(where)


def test_a_confined_connection_reads_and_writes_its_result_set_only(tmp_path):
    out = tmp_path / "merged"
    out.mkdir()
    pq.write_table(pa.table({"tag": [1, 2, 3]}), out / "events.parquet")
    (tmp_path / "secret").write_text("not yours\n")
    db = duckdb.connect()
    db.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{out / 'events.parquet'}')")
    confine(db, out)
    assert db.sql("SELECT count(*) FROM events").fetchall() == [(3,)]
    db.execute(f"COPY (SELECT * FROM events) TO '{out / 'copy.csv'}' (FORMAT csv)")
    assert (out / "copy.csv").read_text().split() == ["tag", "1", "2", "3"]
    for sql in (f"SELECT * FROM read_text('{tmp_path / 'secret'}')", "SELECT * FROM read_text('/etc/shadow')",
                f"SELECT * FROM read_text('{out}/../secret')",
                f"COPY (SELECT 1) TO '{tmp_path / 'written.csv'}'"):
        with pytest.raises(duckdb.PermissionException):
            db.execute(sql)
    with pytest.raises(duckdb.InvalidInputException):
        db.execute("SET enable_external_access = true")  # for good
    assert not (tmp_path / "written.csv").exists()
