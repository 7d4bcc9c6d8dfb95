"""docs/architecture.md's package diagram against the imports the code has: each package's
row names exactly the netspec packages its modules import, so the map cannot drift (it once
showed controller -> nodelib, and left out controller -> camp and links -> datastream)."""

import ast
import re

from support import REPO

PAGE = REPO / "docs" / "architecture.md"
FOLDERS = {"netspec.experiment": "netspec/experiment.py", "netspec.results": "netspec/results.py"}


def drawn() -> dict[str, set[str]]:
    """Each row of the diagram: a package and the packages its arrow names."""
    block = PAGE.read_text().split("## Packages, and the direction of their imports")[1].split("```")[1]
    rows = {}
    for line in block.strip().splitlines():
        name, _, targets = line.partition("->")
        rows[name.split()[0]] = {t.strip() for t in targets.split(",")} - {"nothing"}
    return rows


def imported(package: str) -> set[str]:
    """The netspec packages that `package`'s modules import (itself left out)."""
    paths = [REPO / FOLDERS[package]] if package in FOLDERS else list((REPO / package).rglob("*.py"))
    found = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                # netspec/'s own modules import each other relatively (`from .results import`)
                module = f"netspec.{node.module}" if node.level and package in FOLDERS else node.module
                names = [f"{module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                if found_in := re.match(r"netspec\.([a-z_]+)", name):
                    found.add(f"netspec.{found_in[1]}" if found_in[1] == "results" else found_in[1])
    own = package.removeprefix("netspec.")
    return found - {own, package, "experiment"} if package in FOLDERS else found - {own}


def test_the_package_diagram_names_each_packages_imports_and_no_other():
    rows = drawn()
    assert set(rows) >= {"controller", "web", "analysis", "daemon", "links", "camp", "protocol"}, rows
    wrong = {name: (sorted(targets), sorted(imported(name))) for name, targets in rows.items()
             if targets != imported(name)}
    assert wrong == {}, f"the diagram's row against the code's imports: {wrong}"
