"""The run engine's layout: a module a job, each one of the size the house style keeps
(docs/architecture.md names each part)."""

from pathlib import Path

import netspec.controller.engine as engine

LIMIT = 400  # lines: STYLE.md's "keep modules under about 400 lines"


def test_every_module_of_the_engine_stays_under_the_house_limit_of_lines():
    folder = Path(engine.__file__).parent
    sizes = {path.name: len(path.read_text().splitlines()) for path in folder.glob("*.py")}
    assert "run.py" in sizes
    assert {name: n for name, n in sizes.items() if n > LIMIT} == {}
