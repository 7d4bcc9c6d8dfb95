"""docs/results.md against the result set itself: every table of the demo's merged result set
(and links.parquet, operations.parquet, faults.parquet and packets.parquet, which the demo does
not make, by the columns analysis/links.py, operations.py, faults.py and packets.py write)
has its section, every column its row, and the page names no table or column that is not
there, so the page cannot drift from the merge."""

import re

import pyarrow.parquet as pq
from netspec.analysis.faults import FAULTS as FAULTS_COLUMNS
from netspec.analysis.links import COLUMNS as LINKS_COLUMNS
from netspec.analysis.operations import COLUMNS as OPERATIONS_COLUMNS
from netspec.analysis.packets import PACKETS as PACKETS_COLUMNS
from support import REPO

PAGE = REPO / "docs" / "results.md"


def documented(text: str) -> dict[str, set[str]]:
    """Each `## NAME.parquet` section of the page and the columns its table's rows name (a
    row's first cell: one or more `column`s)."""
    tables = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = section.partition("\n")
        if heading.endswith(".parquet"):
            cells = re.findall(r"^\| ([^|]+) \|", body, re.M)
            tables[heading.removesuffix(".parquet")] = {
                c for cell in cells if cell.strip() not in ("column", "---")
                for c in re.findall(r"`([^`]+)`", cell)}
    return tables


def test_every_table_and_column_of_the_result_set_is_on_the_results_page_and_no_other(demo):
    actual = {p.stem: set(pq.read_schema(p).names) for p in demo.merged.glob("*.parquet")}
    assert len(actual) >= 9, sorted(actual)
    actual["links"] = set(LINKS_COLUMNS.names)
    actual["operations"] = set(OPERATIONS_COLUMNS)  # the demo logs none (tests/analysis/test_operations.py)
    actual["faults"] = set(FAULTS_COLUMNS.names)  # nor has faults (tests/analysis/test_faults.py)
    actual["packets"] = set(PACKETS_COLUMNS.names)  # nor captures (tests/e2e/test_packets.py)
    page = documented(PAGE.read_text())
    missing = {t: sorted(c - page.get(t, set())) for t, c in actual.items() if c - page.get(t, set())}
    gone = {t: sorted(c - actual.get(t, set())) for t, c in page.items() if c - actual.get(t, set())}
    assert missing == {}, f"docs/results.md lacks these tables' columns: {missing}"
    assert gone == {}, f"docs/results.md names what the result set does not have: {gone}"


def test_the_page_check_finds_a_column_missing_and_one_named_that_is_not_there():
    text = PAGE.read_text().replace("| `global_ns` |", "| `global_nanos` |")
    page = documented(text)
    assert "global_ns" not in page["intervals"] and "global_nanos" in page["intervals"]
    assert {"src", "dst", "loss_low_pct", "loss_high_pct"} <= page["links"]
