"""The README stays the essentials (issue 43): short, and the two commands a fresh clone needs
where a reader starts."""

from support import REPO

MOST_LINES = 150
FIRST_LINES = 10


def test_the_readme_is_short_and_opens_with_make_demo_and_make_test():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= MOST_LINES, f"README.md: {len(lines)} lines, over {MOST_LINES}: move the rest"
    first = "\n".join(lines[:FIRST_LINES])
    assert "make demo" in first and "make test" in first, f"README.md's first {FIRST_LINES} lines:\n{first}"
