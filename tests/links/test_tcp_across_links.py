"""Real TCP across a delayed link between two namespaced hosts, as across a real one: the
conditions applied by netspec.links' LinkSet in each sender's namespace, as netspecd applies
them, each direction its own; the truth a real link of the same delay gives, taken in the same
window (a TCP connect's time: one round trip), and the bound the configured rate and the
sockets' buffers set on a bulk transfer (tests/tcplink.py).

Both tests failed before the user-space path released the sender's packets at once: a packet
held in the kernel's queue at the sender's egress stayed charged to its socket, so a request's
second write waited for the first to leave (three one-way delays), and bulk TCP sent about two
segments a delay."""

import contextlib
import json
import statistics
import subprocess
import sys
from pathlib import Path

import tcplink
from support import session_run_id

TCPLINK = str(Path(tcplink.__file__))
PORT = 47_311
DELAY_MS = 10.0


@contextlib.contextmanager
def _role(netns: str, *argv: str):
    """A tcplink role in `netns` that says it is ready (a line) and runs until closed: what it
    said first, and (once closed) last."""
    proc = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, TCPLINK, *argv],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    said: dict = {}
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first, f"tcplink {argv[0]} in {netns} did not start (exit {proc.wait(timeout=30)})"
        said["first"] = json.loads(first)
        yield said
    finally:
        if proc.poll() is None and argv[0] == "serve":
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            out, _ = proc.communicate("", timeout=30)
            if out.strip():
                said["last"] = json.loads(out.strip().splitlines()[-1])
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _client(netns: str, *argv: str) -> dict:
    done = subprocess.run(["ip", "netns", "exec", netns, sys.executable, TCPLINK, *argv], capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def _linked(nethosts, name: str, forward: dict, back: dict):
    """h1 -> h2 under `forward`, h2 -> h1 under `back`, h2 serving; yields what h1's LinkSet
    said: its placement first, its counters once the block ends."""
    h1, h2 = nethosts[0], nethosts[1]
    run_id = session_run_id(name)
    with _role(h1.netns, "hold", run_id, "h2", h2.address, json.dumps(forward)) as there, \
            _role(h2.netns, "hold", run_id, "h1", h1.address, json.dumps(back)), \
            _role(h2.netns, "serve", str(PORT)):
        yield there


def test_a_request_in_two_writes_costs_one_round_trip_as_a_connect_does(nethosts):
    delay = {"delay_ms": DELAY_MS}
    with _linked(nethosts, "tcp2w", delay, delay) as sender:
        got = _client(nethosts[0].netns, "requests", nethosts[1].address, str(PORT), "15")
    parts = sender["first"]["parts"]
    assert parts == {"delay": "user"} or parts == {"delay": "netem"}, parts
    connect, two_send = statistics.median(got["connect_ms"]), statistics.median(got["two_send_ms"])
    # The truth of the same window: a connect is one round trip (2 x 10 ms); the bound.
    assert abs(two_send - connect) <= max(0.05 * connect, 0.25), got


def test_bulk_tcp_reaches_what_the_rate_and_the_buffers_allow_at_the_round_trip(nethosts):
    h1, h2 = nethosts[0], nethosts[1]
    rate = 20.0
    with _linked(nethosts, "tcpbulk", {"delay_ms": DELAY_MS, "rate_mbit": rate}, {"delay_ms": DELAY_MS}):
        got = _client(h1.netns, "bulk", h2.address, str(PORT), "3")
    bound = tcplink.bulk_bound_mbit(rate, 2 * DELAY_MS, tcplink.window_bytes(h1.netns, h2.netns))
    assert got["steady_mbit"] is not None and got["steady_mbit"] >= 0.8 * bound, (got, bound)


def test_a_lossy_links_losses_are_the_senders_tcp_s_to_find_and_retransmit(nethosts):
    """A link's loss is unseen by the sender until the peer's acks say it: each segment lost
    is retransmitted, none is refused to the sender at its own egress (which TCP would send
    again at once, unlost, without counting a loss)."""
    h1, h2 = nethosts[0], nethosts[1]
    with _linked(nethosts, "tcploss", {"delay_ms": 2.0, "loss_pct": 2.0}, {"delay_ms": 2.0}) as sender:
        got = _client(h1.netns, "bulk", h2.address, str(PORT), "2")
    assert sender["first"]["parts"]["loss"] == "user", sender
    lost = sender["last"]["stats"]["dropped_user"]
    # Each segment the link lost was sent again, found lost by the peer's acks (a few more:
    # a retransmission lost too, or one the sender's timers sent early).
    assert lost > 0 and lost <= got["retransmitted"] <= 1.2 * lost + 20, (got, lost)
