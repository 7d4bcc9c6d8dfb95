"""clksync as a node service: the service owns its thread, socket and clock watch, and its
close (or the end of its `with` block) leaves none of them behind, mid-volley too."""

from __future__ import annotations

import socket

import pytest
from netspec.clksync.node import ClockService
from netspec.datastream.instrument import Datastreams
from support import descriptors, threads_named, wait_for

KEY = bytes(32)


@pytest.fixture
def silent_peer():
    """A bound UDP port that never answers: a probe's volley waits out every exchange."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock


def test_a_closed_clock_service_leaves_no_thread_socket_or_timerfd() -> None:
    before = descriptors()
    with ClockService(Datastreams()) as reference, ClockService(Datastreams()) as host:
        port = reference.serve("127.0.0.1", KEY)
        host.probe("ref", "127.0.0.1", port, KEY, interval_s=0.01)
        assert len(threads_named("clksync")) == 2
        wait_for(lambda: host.estimate() is not None, timeout=10, what="an estimate through the probes")
    assert threads_named("clksync") == []
    assert descriptors() == before


def test_closing_mid_volley_waits_for_the_thread_and_its_socket(silent_peer: socket.socket) -> None:
    before = descriptors()
    clock = ClockService(Datastreams())
    clock.probe("ref", "127.0.0.1", silent_peer.getsockname()[1], KEY, interval_s=0.0)
    wait_for(lambda: len(silent_peer.recv(64)), timeout=5, what="the volley's first request")
    clock.close()
    clock.close()
    assert threads_named("clksync") == [] and descriptors() == before
