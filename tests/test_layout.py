"""The suite's own layout: test files named once each, none importing another (helpers live
in modules of their own, such as tests/support.py), and the end-to-end tier, tests/e2e,
marked e2e whatever its files say, so that `make test-quick` leaves it out whole."""

import ast
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).parent


def all_test_files():
    return sorted(TESTS.rglob("test_*.py"))


def test_no_two_test_files_share_a_name():
    # pytest imports each test file by its name alone (tests/ is on the path): a second
    # file of one name is an import error, or worse, the first file run twice.
    names = Counter(path.name for path in all_test_files())
    assert [name for name, count in names.items() if count > 1] == []


def test_no_test_file_imports_another():
    found = []
    for path in all_test_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.relative_to(TESTS)}: {m}" for m in modules
                      if m.split(".")[-1].startswith("test_") or m.split(".")[0] == "conftest"]
    assert found == []


def test_an_end_to_end_test_is_left_out_of_the_quick_tier_though_its_file_forgot_its_mark():
    probe = TESTS / "e2e" / f"test_unmarked_probe_{os.getpid()}.py"
    probe.write_text("def test_a_file_that_forgot_its_mark():\n    pass\n")
    try:
        quick = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist",
                                "-p", "no:cacheprovider", "-m", "not e2e", str(probe)],
                               capture_output=True, text=True, cwd=TESTS.parent, timeout=120)
    finally:
        probe.unlink()
    # pytest's exit status 5: no test collected (here, the one deselected).
    assert quick.returncode == 5 and "1 deselected" in quick.stdout, quick.stdout + quick.stderr
