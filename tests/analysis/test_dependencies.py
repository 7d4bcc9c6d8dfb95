"""The libraries that change results are bounded in pyproject.toml and pinned in
constraints.txt, and the tests run on the pinned set."""

from __future__ import annotations

import importlib.metadata
import tomllib

from packaging.requirements import Requirement
from support import REPO

RESULT_CHANGING = {"duckdb", "pyarrow", "numba", "numpy", "scipy"}


def pins() -> dict[str, str]:
    lines = (REPO / "constraints.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def test_every_library_that_changes_results_has_an_upper_bound_its_pin_lies_within():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    required = {r.name: r for r in map(Requirement, project["dependencies"])}
    pinned = pins()
    for name in sorted(RESULT_CHANGING):
        assert any(s.operator in ("<", "<=") for s in required[name].specifier), f"{name} has no upper bound"
        assert name in pinned, f"{name} is not pinned in constraints.txt"
        assert required[name].specifier.contains(pinned[name]), f"{name}=={pinned[name]} is out of its bounds"


def test_the_tests_run_on_the_pinned_versions():
    installed = {name: importlib.metadata.version(name) for name in pins()}
    assert installed == pins(), "make setup installs constraints.txt: run it again"
