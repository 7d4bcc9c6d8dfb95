"""The one rule for names that become paths."""

from pathlib import Path

import pytest
from netspec.protocol.errors import ProtocolError
from netspec.protocol.names import as_name, confined, safe_name


@pytest.mark.parametrize("name", ["20261123T065211Z-c510b7", "client", "stim.client.42.ds", "a_b-c.d"])
def test_a_safe_name_passes(name):
    assert safe_name(name, "x") == name


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "/abs", ".hidden", "-flag", "a b", 7, None,
                                  "x" * 201, "a\0b"])
def test_anything_else_is_refused_naming_what_it_was(name):
    with pytest.raises(ProtocolError) as refused:
        safe_name(name, "component")
    assert str(refused.value).startswith(f"component {name!r} is not a name netspec makes a path of")


def test_confined_keeps_a_daemons_file_names_under_the_run_directory():
    root = Path("/runs/r")
    assert confined(root, "streams/stim.c.1.ds", "file") == root / "streams" / "stim.c.1.ds"
    for bad in ("../../etc/passwd", "/etc/passwd", "files/../../x", "", "files/.ssh"):
        with pytest.raises(ProtocolError):
            confined(root, bad, "file")


def test_a_users_file_name_is_made_a_safe_one():
    assert as_name("my results (1).csv") == "my_results__1_.csv"
    assert as_name("..") == "file" and as_name(".bashrc") == "bashrc"
