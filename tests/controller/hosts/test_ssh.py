"""Resolving SSH targets from the SSH config files netspec reads."""

import socket
import threading

import pytest
from netspec.controller.experiment.sshtargets import resolve
from netspec.controller.hosts.ssh import SSHConnection, Tunnel


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


def test_closing_a_tunnel_hangs_up_its_connections_and_joins_every_thread_it_started(ssh_env):
    host = ssh_env[0]
    threads = set(threading.enumerate())
    with SSHConnection(host.alias, resolve(host.alias)) as conn, Tunnel(conn, (host.address, 22)) as tunnel:
        port = tunnel.open()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            assert sock.recv(64).startswith(b"SSH-2.0")  # the host's sshd, through a pump thread
            assert tunnel.close() == []  # none still running
            assert sock.recv(64) == b""  # hung up
    assert set(threading.enumerate()) - threads == set()  # the connection's own thread too


def test_opening_an_open_connection_keeps_it_and_closing_it_twice_leaves_no_thread(ssh_env):
    host = ssh_env[0]
    threads = set(threading.enumerate())
    conn = SSHConnection(host.alias, resolve(host.alias))
    conn.open()
    transport = conn.transport
    conn.open()
    assert conn.transport is transport
    conn.close()
    conn.close()
    assert set(threading.enumerate()) - threads == set()
