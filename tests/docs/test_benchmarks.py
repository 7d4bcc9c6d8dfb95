"""bench/RESULTS.md opens with today's headline figures (issue 43): one table, every row a
figure with its value, machine, date and the command that takes it again; the manual's
reference/benchmarks.md is made from that section."""

import re

from support import REPO

COLUMNS = ["figure", "value", "machine", "date", "command"]


def headline_rows() -> list[list[str]]:
    text = (REPO / "bench" / "RESULTS.md").read_text()
    section = text.split("\n## Headline figures\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def test_each_headline_figure_has_its_value_machine_date_and_a_command_that_exists():
    header, rule, *rows = headline_rows()
    assert header == COLUMNS and set("".join(rule)) <= set("-|")
    assert len(rows) >= 20
    for figure, value, machine, date, command in rows:
        assert value and machine and re.fullmatch(r"\d{4}-\d{2}-\d{2}", date), figure
        scripts = re.findall(r"(?:bench/|\.\./\.venv/bin/python )(\w+\.py)", command)
        assert scripts or command in ("as the row above", "`.venv/bin/ns_control image build`"), figure
        for script in scripts:
            assert (REPO / "bench" / script).is_file(), f"{figure}: {command} names a bench that is not there"
