"""The application API, driven over a real socketpair as netspecd drives it."""

import json
import os
import socket
import subprocess
import sys
import threading

import pytest
from netspec import nodelib
from netspec.nodelib.phases import Application
from netspec.protocol.blockingchannel import BlockingChannel
from netspec.protocol.errors import NetspecError


def test_the_public_surface_is_pinned_and_every_name_says_what_it_is():
    assert sorted(nodelib.__all__) == ["Application", "ConnectionLost", "NetspecError", "Pacer",
                                       "PhaseContext", "PhaseWarning", "ProtocolError", "claim",
                                       "component_params",
                                       "counter", "event", "histogram", "interval", "operation", "phase",
                                       "register", "run", "samples", "trigger"]
    assert [n for n in nodelib.__all__ if not (getattr(nodelib, n).__doc__ or "").strip()] == []
    assert issubclass(nodelib.ConnectionLost, nodelib.NetspecError)


def test_importing_nodelib_opens_nothing_even_where_a_plain_command_logs(tmp_path):
    """A plain command's streams open at its first entity, not at import."""
    env = {**os.environ, "NETSPEC_LOGGING": json.dumps({"dir": str(tmp_path), "host": "h", "streams": {
        "s": {"enable": ["*"]}}}), "NETSPEC_COMPONENT": "c", "NETSPEC_RUN": "r"}
    env.pop("NETSPEC_FD", None)
    code = ("import os, sys; from netspec import nodelib; print(len(os.listdir(sys.argv[1])));"
            "nodelib.event('G', 'e').log(1); print(len(os.listdir(sys.argv[1])))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True,
                          text=True)
    assert done.stdout.split() == ["0", "1"], done.stderr


def test_a_phase_name_can_be_registered_only_once():
    app = Application()
    app.register("run", lambda ctx: None)
    with pytest.raises(NetspecError, match="registered twice"):
        app.register("run", lambda ctx: None)


def test_run_outside_netspecd_says_how_to_start_it(monkeypatch):
    monkeypatch.delenv("NETSPEC_FD", raising=False)
    with pytest.raises(NetspecError, match="ns_control run"):
        Application().run()


def _drive(app: Application, monkeypatch, phases: list[tuple[str, dict]]) -> tuple[list, list]:
    """Play the daemon: register, welcome, enter each phase, collect acks, stop."""
    ours, theirs = socket.socketpair()
    monkeypatch.setenv("NETSPEC_FD", str(theirs.fileno()))
    runner = threading.Thread(target=app.run)
    runner.start()
    daemon = BlockingChannel(ours.detach())
    register = daemon.recv()
    daemon.send({"t": "welcome", "component": "c", "run": "r"})
    acks = []
    for i, (phase, params) in enumerate(phases):
        daemon.send({"t": "enter", "id": i, "phase": phase, "params": params,
                     "published": {"other": {"port": 7}}})
        acks.append(daemon.recv())
    daemon.send({"t": "stop"})
    runner.join(timeout=10)
    assert not runner.is_alive()
    with pytest.raises(OSError):
        os.fstat(theirs.fileno())  # run() closed its end
    return register, acks


def test_callbacks_become_acks(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    app = Application()

    @app.phase()
    def listen(ctx):
        ctx.publish(port=ctx.lookup("other", "port") + ctx.params["add"])
        ctx.hand_back("out.csv")
        return "listening"

    @app.phase("run")
    def misbehave(ctx):
        raise ValueError("bad input")

    @app.phase()
    def check(ctx):
        ctx.warn("odd")

    @app.phase()
    def soft(ctx):
        raise nodelib.PhaseWarning("soft failure")

    register, acks = _drive(app, monkeypatch, [("listen", {"add": 1}), ("run", {}),
                                               ("check", {}), ("soft", {})])
    assert register["phases"] == ["check", "listen", "run", "soft", "start_logging", "stop_logging"]
    ok, error, warning, softened = acks
    assert (ok["status"], ok["message"], ok["published"]) == ("ok", "listening", {"port": 8})
    assert ok["files"] == [str(tmp_path / "out.csv")]
    assert ok["started"] <= ok["ended"]
    assert (error["status"], error["message"]) == ("error", "ValueError: bad input")
    assert "raise ValueError" in error["traceback"]
    assert (warning["status"], warning["message"]) == ("warning", "odd")
    assert (softened["status"], softened["message"]) == ("warning", "soft failure")


def test_looking_up_a_value_nobody_published_is_a_clear_error(monkeypatch):
    app = Application()
    app.register("run", lambda ctx: ctx.lookup("server", "port"))
    _, (ack,) = _drive(app, monkeypatch, [("run", {})])
    assert ack["message"] == ("NetspecError: component 'server' has not published 'port' "
                              "before phase 'run'")


def test_a_role_is_claimed_only_while_run_talks_to_netspecd_and_only_by_a_roles_name():
    app = Application()
    with pytest.raises(NetspecError, match=r"while nodelib\.run"):
        app.claim("leader")
    with pytest.raises(NetspecError, match="'lead er' is not a role"):
        app.claim("lead er")
