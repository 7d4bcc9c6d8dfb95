"""Resolving SSH targets from the SSH config files netspec reads."""

import pytest
from netspec.controller.experiment.sshtargets import resolve


@pytest.fixture
def configs(tmp_path, monkeypatch):
    """Write two SSH config files, named in that order by NETSPEC_SSH_CONFIG."""
    def write(first: str, second: str) -> None:
        (tmp_path / "first").write_text(first)
        (tmp_path / "second").write_text(second)
        monkeypatch.setenv("NETSPEC_SSH_CONFIG", f"{tmp_path / 'first'}:{tmp_path / 'second'}")
        monkeypatch.setenv("HOME", str(tmp_path))
    return write


def test_an_alias_named_only_in_a_later_config_file_takes_that_files_hostname(configs):
    configs("Host other\n  HostName 10.0.0.1\n",
            "Host box\n  HostName 192.0.2.7\n  User alice\n  Port 2222\n")
    target = resolve("box")
    assert (target.hostname, target.user, target.port) == ("192.0.2.7", "alice", 2222)


def test_the_first_file_naming_an_alias_wins_and_a_plain_name_stays_itself(configs):
    configs("Host box\n  HostName 192.0.2.1\n", "Host box\n  HostName 192.0.2.2\n")
    assert resolve("box").hostname == "192.0.2.1"
    assert resolve("bob@plain:22").hostname == "plain"
