"""`ns_control init` (controller/cli/starter.py) overwrites nothing. That what it writes runs
as written to ok is the first tutorial's marked run (tests/docs/test_examples.py), whose
copies of the files tests/controller/cli/test_starter.py holds equal to what init writes."""

from __future__ import annotations

from support import ns_control


def test_init_writes_the_starter_and_never_overwrites(tmp_path):
    here = tmp_path / "first"
    done = ns_control("init", str(here), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = {p.name: p.read_text() for p in here.iterdir()}
    assert set(written) == {"experiment.yaml", "echo.py"}
    assert "tutorials/first-experiment.md" in written["experiment.yaml"]  # it names where to read on

    # A second init there names both files and changes neither.
    again = ns_control("init", str(here), cwd=tmp_path)
    assert again.returncode != 0
    assert again.stderr.splitlines() == [
        f"error: {here / name}: exists; ns_control init overwrites nothing (nothing written)"
        for name in ("experiment.yaml", "echo.py")]
    assert {p.name: p.read_text() for p in here.iterdir() if p.is_file()} == written

    # One file there is enough: nothing is written, not even the other.
    other = tmp_path / "other"
    other.mkdir()
    (other / "echo.py").write_text("mine\n")
    refused = ns_control("init", str(other), cwd=tmp_path)
    assert refused.returncode != 0 and f"{other / 'echo.py'}: exists" in refused.stderr
    assert [p.name for p in other.iterdir()] == ["echo.py"] and (other / "echo.py").read_text() == "mine\n"
