"""`ns_control init`'s files (controller/cli/starter.py) as the first tutorial shows them; the
run of what it writes is tests/e2e/test_init_command.py."""

from __future__ import annotations

from netspec.controller.cli import starter
from support import REPO

TUTORIAL = REPO / "docs" / "tutorials" / "first-experiment.md"


def test_the_first_tutorial_quotes_the_starter_files_as_init_writes_them():
    page = TUTORIAL.read_text()
    assert f"```yaml\n{starter.EXPERIMENT}```\n" in page
    assert f"```python\n{starter.PROGRAM}```\n" in page
