"""The link audit's TCP probes (netspec.links.tcpprobes): what a step's probes of a link took,
against what the link's conditions imply, in the same window.

A connect is one round trip on any link, so the probes carry their own truth: a request in
two writes should cost what the connect did, and the burst (BURST bytes on a fresh
connection) as many round trips as slow start takes from its initial window, plus its
serialisation at the link's rate. The fastest of the step's probes is compared (the
distortions this catches are systematic, while a loss or a busy machine only slows some
probes): past REQUEST_SHARE (and REQUEST_FLOOR_MS) or BURST_SHARE (and BURST_FLOOR_MS) of
what is implied, the verdict says "the emulation changes TCP".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import duckdb
from netspec.datastream.schema import TcpProbeRecord

MSS = 1448  # a segment's payload on an Ethernet link with TCP timestamps
INITIAL_WINDOW = 10  # segments: Linux's initial congestion window (RFC 6928)
REQUEST_SHARE, REQUEST_FLOOR_MS = 0.25, 0.5
BURST_SHARE, BURST_FLOOR_MS = 0.5, 1.0


@dataclass(frozen=True)
class TcpFigures:
    """A link's TCP probes in one step: how many, how many failed, the fastest connect,
    request and burst (ms), and the burst's time the connect implies."""

    probes: int = 0
    failed: int = 0
    connect_ms: float | None = None
    request_ms: float | None = None
    burst_ms: float | None = None
    burst_expected_ms: float | None = None

    def columns(self) -> dict[str, int | float | None]:
        return {"tcp_probes": self.probes, "tcp_failed": self.failed, "tcp_connect_ms": self.connect_ms,
                "tcp_request_ms": self.request_ms, "tcp_burst_ms": self.burst_ms,
                "tcp_burst_expected_ms": self.burst_expected_ms}


def slow_start_rounds(size: int, mss: int = MSS, initial: int = INITIAL_WINDOW) -> int:
    """Round trips a fresh connection takes to deliver `size` bytes in slow start: its window
    doubling from `initial` segments each round."""
    segments = max(1, math.ceil(size / mss))
    return max(1, math.ceil(math.log2(segments / initial + 1)))


def figures(probes: list[TcpProbeRecord], rate_mbit: float | None) -> TcpFigures:
    done = [p for p in probes if p.error is None and None not in (p.connect_ns, p.request_ns, p.burst_ns)]
    if not done:
        return TcpFigures(probes=len(probes), failed=len(probes))
    connect = min(p.connect_ns for p in done) / 1e6  # type: ignore[type-var]
    size = max(p.burst_bytes for p in done)
    serialise = size * 8 / (rate_mbit * 1e3) if rate_mbit else 0.0
    return TcpFigures(probes=len(probes), failed=len(probes) - len(done), connect_ms=connect,
                      request_ms=min(p.request_ns for p in done) / 1e6,  # type: ignore[type-var]
                      burst_ms=min(p.burst_ns for p in done) / 1e6,  # type: ignore[type-var]
                      burst_expected_ms=slow_start_rounds(size) * connect + serialise)


def changes(row: dict) -> str | None:
    """The words for a link whose TCP probes took longer than its conditions imply (None:
    they did not, or there were none to judge)."""
    connect, request, burst, expected = (row.get("tcp_connect_ms"), row.get("tcp_request_ms"),
                                         row.get("tcp_burst_ms"), row.get("tcp_burst_expected_ms"))
    if connect is None or request is None or burst is None or expected is None:
        return None
    late_request = request > (1 + REQUEST_SHARE) * connect + REQUEST_FLOOR_MS
    late_burst = burst > (1 + BURST_SHARE) * expected + BURST_FLOOR_MS
    if not (late_request or late_burst):
        return None
    return (f"the emulation changes TCP: a request in two writes cost {request / connect:.2f} round trips "
            f"(a connect's {connect:.3f} ms), a burst {burst:.3f} ms against {expected:.3f} ms implied")


def lines(db: duckdb.DuckDBPyConnection) -> list[str]:
    """The TCP probes' part of the audit's section: a line per link and step that has them."""
    rows = db.execute("""SELECT src, dst, phase, tcp_probes, tcp_failed, tcp_connect_ms, tcp_request_ms,
                                tcp_burst_ms, tcp_burst_expected_ms
                         FROM links WHERE tcp_probes > 0 ORDER BY step, src, dst""").fetchall()
    if not rows:
        return []
    out = ["TCP probes (the fastest of each step: a connect, a request in two writes, a 64 KB burst, ms):",
           f"  {'link':<20} {'phase':<12} {'probes':>7} {'failed':>6} {'connect':>9} {'request':>9} "
           f"{'burst':>9} {'implied':>9}"]
    for src, dst, phase, probes, failed, connect, request, burst, implied in rows:
        cells = [f"{v:9.3f}" if v is not None else f"{'-':>9}" for v in (connect, request, burst, implied)]
        out.append(f"  {src + ' -> ' + dst:<20} {phase:<12} {probes:>7} {failed:>6} {' '.join(cells)}")
    return out
