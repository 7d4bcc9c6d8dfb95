"""A network namespace of a test's own with a veth pair in it (`veth_netns`), for the tests of
link conditions and of what a killed daemon left: imported by tests/conftest.py."""

import os
import secrets
import subprocess

import pytest


class Netns:
    """A network namespace by its name; `run` a command in it (its stdout)."""

    def __init__(self, name: str):
        self.name = name

    def run(self, *argv: str) -> str:
        return subprocess.run(["ip", "netns", "exec", self.name, *argv], capture_output=True, text=True,
                              timeout=60, check=True).stdout


@pytest.fixture
def veth_netns():
    """A network namespace of this test's own with a veth pair up, eth0 at 10.250.77.1/24
    (eth1 its other end); removed after."""
    if os.geteuid() != 0:
        pytest.skip("a network namespace, qdiscs and rules need root")
    netns = f"nsl{secrets.token_hex(4)}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        made = Netns(netns)
        for command in ("ip link add eth0 type veth peer name eth1", "ip addr add 10.250.77.1/24 dev eth0",
                        "ip link set eth0 up", "ip link set eth1 up"):
            made.run(*command.split())
        yield made
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)
