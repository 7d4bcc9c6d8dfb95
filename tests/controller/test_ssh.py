"""Resolving SSH targets from the SSH config files netspec reads."""

from netspec.controller.ssh import resolve


def test_an_alias_named_only_in_a_later_config_file_takes_that_files_hostname(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_text("Host other\n  HostName 10.0.0.1\n")
    second.write_text("Host box\n  HostName 192.0.2.7\n  User alice\n  Port 2222\n")
    monkeypatch.setenv("NETSPEC_SSH_CONFIG", f"{first}:{second}")
    monkeypatch.setenv("HOME", str(tmp_path))
    target = resolve("box")
    assert (target.hostname, target.user, target.port) == ("192.0.2.7", "alice", 2222)


def test_the_first_file_naming_an_alias_wins_and_a_plain_name_stays_itself(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    first.write_text("Host box\n  HostName 192.0.2.1\n")
    second.write_text("Host box\n  HostName 192.0.2.2\n")
    monkeypatch.setenv("NETSPEC_SSH_CONFIG", f"{first}:{second}")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve("box").hostname == "192.0.2.1"
    assert resolve("bob@plain:22").hostname == "plain"
