"""`ns_control init` (controller/cli/starter.py): the starter it writes runs as written, and it
overwrites nothing."""

from __future__ import annotations

from support import ns_control


def test_init_writes_a_starter_that_runs_to_ok_and_never_overwrites(tmp_path):
    here = tmp_path / "first"
    done = ns_control("init", str(here), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = {p.name: p.read_text() for p in here.iterdir()}
    assert set(written) == {"experiment.yaml", "echo.py"}
    assert "tutorials/first-experiment.md" in written["experiment.yaml"]  # it names where to read on

    run = ns_control("run", "experiment.yaml", cwd=here)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "run " in run.stdout and "  starter  ok  " in run.stdout
    assert "b/client: 2000 round trips, median" in run.stdout   # the program's own ack
    assert "4000 intervals on one timeline" in run.stdout      # its ECHO/rtt and the one_way pair
    assert "causality one_way: 2000 matched, every end after its start" in run.stdout  # across hosts

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
