"""Who `ns_control serve` serves: a Host header that names it, the user who started it as they
are, anyone else (another user of this machine) only with the token of the URL it printed."""

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from netspec.web.access import Access, peer_uid
from support import REPO

RUN = REPO / "tests" / "data" / "runs" / "stimulus-response" / "20261121T181343Z-23d1a4"
# Another user's client: the system's Python, which `nobody` may run (this tree may be closed to it).
AS_NOBODY = """import sys, urllib.request, urllib.error
request = urllib.request.Request(sys.argv[1], headers=dict(h.split(": ", 1) for h in sys.argv[2:]))
try:
    with urllib.request.urlopen(request, timeout=30) as response:
        print(response.status, response.headers.get("set-cookie", ""), response.read().decode(), sep="\\n")
except urllib.error.HTTPError as exc:
    print(exc.code, "", exc.read().decode(), sep="\\n")
"""


@contextmanager
def serving(runs: Path) -> Iterator[str]:
    """`ns_control serve` on a free port over `runs`; yields the URL it printed."""
    proc = subprocess.Popen([sys.executable, "-m", "netspec.controller.cli", "serve", "--port", "0",
                             "--runs", str(runs)], cwd=runs.parent, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        said, deadline = b"", time.monotonic() + 30
        while b"\n" not in said and time.monotonic() < deadline and proc.poll() is None:
            if select.select([proc.stdout], [], [], 0.2)[0]:
                said += os.read(proc.stdout.fileno(), 4096)
        assert b"\n" in said, (said, proc.poll())
        yield said.decode().split()[3]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def as_nobody(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = subprocess.run(["/usr/bin/python3", "-c", AS_NOBODY, url, *(f"{k}: {v}" for k, v in
                                                                       (headers or {}).items())],
                          user="nobody", cwd="/", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    status, cookie, body = done.stdout.split("\n", 2)
    return int(status), cookie, body


@pytest.fixture
def private_runs(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(RUN, runs / "stimulus-response" / RUN.name)
    os.chmod(runs, 0o700)  # root's own, as a run directory is its owner's
    return runs


def test_serve_lets_its_user_in_and_anyone_else_only_with_its_token(private_runs):
    with serving(private_runs) as url:
        base = url.split("?")[0]
        status, page = get(base)  # root, who started it: as they are
        assert status == 200 and RUN.name in page
        status, _, page = as_nobody(base)  # another user of this machine
        assert status == 403 and RUN.name not in page
        assert "serves the user who started it; anyone else opens the URL it printed" in page
        token = url.split("?token=")[1]
        assert len(token) >= 32
        assert as_nobody(f"{base}?token=wrong")[0] == 403
        status, cookie, page = as_nobody(url)  # the URL printed
        assert status == 200 and RUN.name in page
        assert cookie.startswith(f"netspec-serve-{base.rsplit(':', 1)[1].strip('/')}={token}; ")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        status, _, page = as_nobody(f"{base}run/stimulus-response/{RUN.name}",
                                    {"Cookie": cookie.split(";")[0]})
        assert status == 200 and RUN.name in page


def test_serve_refuses_a_host_header_that_does_not_name_it(private_runs):
    with serving(private_runs) as url:
        base = url.split("?")[0]
        port = base.rsplit(":", 1)[1].strip("/")
        for name in ("localhost", "127.0.0.1"):
            assert get(base, {"Host": f"{name}:{port}"})[0] == 200
        status, page = get(url, {"Host": f"rebound.example:{port}"})  # even with the token
        assert status == 403 and "'rebound.example:" in page and "DNS rebinding" in page


def test_the_host_header_names_the_address_served():
    assert Access("127.0.0.1", 80).host_ok("localhost:80") and Access("::1", 80).host_ok("[::1]:80")
    assert not Access("127.0.0.1", 80).host_ok("attacker.example:80")
    assert not Access("192.0.2.1", 80).host_ok("localhost")
    assert Access("0.0.0.0", 80).host_ok("192.0.2.7:80") and not Access("0.0.0.0", 80).host_ok("evil.example")


def test_a_peers_user_is_the_owner_the_kernel_lists_for_its_socket():
    server = socket.create_server(("127.0.0.1", 0))
    with server, socket.create_connection(server.getsockname()) as client:
        assert peer_uid(client.getsockname(), server.getsockname()) == os.geteuid()
        assert peer_uid(("127.0.0.1", 1), server.getsockname()) is None
    server = socket.create_server(("::", 0), family=socket.AF_INET6, dualstack_ipv6=True)
    with server, socket.create_connection(("127.0.0.1", server.getsockname()[1])):
        accepted, peer = server.accept()  # both ends as ::ffff:127.0.0.1, in /proc/net/tcp6
        with accepted:
            assert peer_uid(peer[:2], accepted.getsockname()[:2]) == os.geteuid()
