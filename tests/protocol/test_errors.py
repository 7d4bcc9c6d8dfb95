from netspec.controller.record.results import ComponentResult
from netspec.protocol.errors import (
    ComponentFailed,
    ConfigError,
    ConnectionLost,
    DeadlineExceeded,
    RemoteError,
    StepFailed,
)
from netspec.protocol.kinds import WireError


def test_messages_name_who_and_where():
    assert str(ConfigError("unknown host 'c'", "exp.yaml", 14, "components.client.host")) == \
        "exp.yaml:14: components.client.host: unknown host 'c'"
    assert str(ConnectionLost("b", "run", "reset by peer")) == \
        "phase 'run', host b: connection lost (reset by peer)"
    assert str(DeadlineExceeded("run", {"b": ["client"], "a": ["x", "y"]}, 2.5)) == \
        "phase 'run': deadline of 2.5 s passed, still waiting for host a: x, y; host b: client"
    assert str(RemoteError("a", WireError(type="KeyError", message="'x'"))) == "host a: KeyError: 'x'"


def test_component_failed_shows_command_exit_and_the_last_ten_lines_of_each_stream():
    result = ComponentResult("b", "client", ["client.py", "--n", "3"], exit_status=3,
                             duration_s=12.4)
    result.add_output("stdout", "".join(f"line {i}\n" for i in range(15)).encode())
    result.add_output("stderr", "".join(f"noise {i}\n" for i in range(30)).encode())
    assert str(ComponentFailed(result, "run")).splitlines() == [
        "phase 'run', host b: component 'client' exited 3 after 12.4 s",
        "  command: client.py --n 3",
        "  last lines of stdout:",
        *[f"  | line {i}" for i in range(5, 15)],
        "  last lines of stderr:",
        *[f"  | noise {i}" for i in range(20, 30)]]


def test_step_failed_tells_succeeded_from_failed_hosts():
    cause = RemoteError("b", WireError(type="X", message="y"))
    error = StepFailed("run", {"a": [{"status": "ok"}], "b": cause})
    assert str(error) == "phase 'run' failed on b"
    assert error.failed == {"b": cause} and list(error.succeeded) == ["a"]


def test_a_daemons_own_python_error_says_where_it_was_and_netspecs_own_errors_say_what_they_say():
    # the set-up's OSError that named no peer when a pod had no route to another node's pods
    traceback = ('Traceback (most recent call last):\n'
                 '  File "/opt/netspec/venv/lib/python3.11/site-packages/netspec/daemon/handlers.py", '
                 'line 90, in setup\n    links.place(rules)\n'
                 '  File "/opt/netspec/venv/lib/python3.11/site-packages/netspec/links/linkset.py", '
                 'line 212, in place\n    route = _route(peer)\n'
                 'OSError: [Errno 101] Network is unreachable\n')
    said = WireError(type="OSError", message="[Errno 101] Network is unreachable", traceback=traceback)
    assert str(RemoteError("b", said)) == ("host b: OSError: [Errno 101] Network is unreachable "
                                           "(at links/linkset.py:212, in place)")
    own = WireError(type="NetspecError", message="unknown component 'x'", traceback=traceback)
    assert str(RemoteError("b", own)) == "host b: NetspecError: unknown component 'x'"
    assert str(RemoteError("b", WireError(type="KeyError", message="'x'"))) == "host b: KeyError: 'x'"
