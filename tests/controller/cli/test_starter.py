"""`ns_control init`'s files (controller/cli/starter.py) as the first tutorial shows them; the
run of what it writes is the first tutorial's marked example (tests/docs/test_examples.py),
its refusals tests/controller/cli/test_init_command.py."""

from __future__ import annotations

import os
import stat

from netspec.controller.cli import starter
from support import REPO, ns_control

TUTORIAL = REPO / "docs" / "tutorials" / "first-experiment.md"


def test_the_first_tutorial_quotes_the_starter_files_as_init_writes_them():
    page = TUTORIAL.read_text()
    assert f"```yaml\n{starter.EXPERIMENT}```\n" in page
    assert f"```python\n{starter.PROGRAM}```\n" in page


def test_init_writes_the_users_own_files_with_the_users_umask_not_a_runs_private_one(tmp_path):
    here = tmp_path / "mine" / "first"
    umask = os.umask(0o022)  # the child inherits it, as from a user's shell
    try:
        done = ns_control("init", str(here), cwd=tmp_path)
    finally:
        os.umask(umask)
    assert done.returncode == 0, done.stderr
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode)
             for p in (here.parent, here, *here.iterdir())}
    assert modes == {"mine": 0o755, "mine/first": 0o755, "mine/first/experiment.yaml": 0o644,
                     "mine/first/echo.py": 0o644}
