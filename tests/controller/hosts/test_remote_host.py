"""Stopping an SSH host's attached daemon: each wait bounded, what went wrong said."""

import threading

from netspec.controller.experiment.model import Host as HostSpec
from netspec.controller.hosts import remote
from netspec.controller.hosts.remote import SSHHost, _copy_stderr


def test_stopping_a_daemon_that_does_not_exit_at_the_end_of_its_stdin_gives_up_and_says_so(
        ssh_env, tmp_path, monkeypatch):
    monkeypatch.setattr(remote, "STOP_S", 1.0)  # the bound under test, shortened
    host = SSHHost(HostSpec(name="h", ssh=ssh_env[0].alias))
    host.conn.open()
    # In the attached daemon's place: a program that ignores its stdin's end, and ends only
    # when its channel is closed (its next write fails).
    host.daemon = host.conn.start(["sh", "-c", "while echo waiting; do sleep 0.1; done"])
    host.stderr_copy = threading.Thread(target=_copy_stderr, args=(host.daemon, tmp_path / "netspecd.log"),
                                        daemon=True)
    host.stderr_copy.start()
    said = []
    stopping = threading.Thread(target=lambda: said.extend(host._stop("")), daemon=True)
    stopping.start()
    stopping.join(20)
    assert not stopping.is_alive(), "stopping the host did not return within 20 s"
    assert said == ["netspecd did not exit within 1 s of its stdin's end: hung up on"]
    assert host.daemon is None and host.stderr_copy is None and host.conn.client is None
