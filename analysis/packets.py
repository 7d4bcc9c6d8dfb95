"""The experiment's own packets on the global timeline: merged/packets.parquet, each packet
a host sent matched with its receipt on the other host, both kernel stamps converted with
their hosts' clock fits, and what was not matched counted per link and phase.

Each host's captures (daemon/packets.py; their records, protocol/packets.py) are pcap files
with nanosecond stamps. A packet is a send on the host whose interface has its source address,
a receipt on the host whose interface has its destination. A UDP (or other) packet is known at
both ends by its addresses, protocol and IP ID, a TCP segment by its addresses, ports,
sequence number and length; the n-th packet of a key sent is the n-th received (an IP ID that
wraps, a segment sent again). A send with no receipt is lost where the receiver was capturing
then (to LOST_GRACE_NS before its capture ended), else outside its capture; a receipt with no
send is unmatched (the sender's capture missed it, or dropped it).
"""

from __future__ import annotations

import struct
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from netspec.clksync.fit import ClockFit
from netspec.protocol.packets import PACKETS_DIR, RAW_IPV4, CaptureRecord, read_records

from .convert import CompiledFit
from .links import windows
from .units import duration_text

NANO_MAGIC, MICRO_MAGIC = 0xA1B23C4D, 0xA1B2C3D4
ETHERNET = 1
PAYLOAD_KEY = 32  # bytes of a datagram's payload that name it with its header
LOST_GRACE_NS = 100_000_000  # a send this close to the end of its receiver's capture is outside it
TCP, UDP = 6, 17

# packets.parquet's columns, in order (docs/results.md says each).
PACKETS = pa.schema([
    ("src_host", pa.string()), ("dst_host", pa.string()), ("proto", pa.string()), ("flow", pa.string()),
    ("size", pa.int32()), ("ip_id", pa.int32()), ("seq", pa.int64()), ("step", pa.int32()),
    ("phase", pa.string()), ("sent_ts", pa.int64()), ("sent_bound_ns", pa.int64()),
    ("received_ts", pa.int64()), ("received_bound_ns", pa.int64()), ("one_way_ns", pa.int64()),
    ("bound_ns", pa.int64()), ("matched", pa.bool_())])


@dataclass(frozen=True)
class Packet:
    """One packet as a capture saw it: its stamp on its host's clock and what names it."""

    ts: int
    src: str
    dst: str
    proto: int
    size: int
    ip_id: int
    sport: int
    dport: int
    seq: int  # a TCP segment's; -1 otherwise
    length: int  # a TCP segment's payload bytes; the IP packet's otherwise
    head: bytes  # the first PAYLOAD_KEY bytes of its payload, as captured

    def key(self) -> tuple[object, ...]:
        """What names it at both ends. A datagram's IP ID alone would not: Linux sends an
        unconnected socket's datagrams with DF set and ID 0, so its ports and the head of its
        payload name it too."""
        if self.proto == TCP:
            return (self.src, self.sport, self.dst, self.dport, TCP, self.seq, self.length)
        return (self.src, self.sport, self.dst, self.dport, self.proto, self.ip_id, self.size, self.head)

    def flow(self) -> str:
        name = {TCP: "tcp", UDP: "udp"}.get(self.proto, str(self.proto))
        ports = (f":{self.sport}", f":{self.dport}") if self.proto in (TCP, UDP) else ("", "")
        return f"{name} {self.src}{ports[0]} > {self.dst}{ports[1]}"


def read_pcap(path: Path) -> list[Packet]:
    """The IPv4 packets of a pcap file (Ethernet links, or raw IP: the user-space link path's
    held packets), their stamps in ns.

    Raises:
        ValueError: not a pcap file, or of another link type (naming it).
    """
    data = path.read_bytes()
    if len(data) < 24:
        return []
    magic = struct.unpack_from("<I", data)[0]
    if magic not in (NANO_MAGIC, MICRO_MAGIC):
        raise ValueError(f"{path}: not a little-endian pcap file (magic {magic:#x})")
    scale = 1 if magic == NANO_MAGIC else 1000
    linktype = struct.unpack_from("<I", data, 20)[0]
    if linktype not in (ETHERNET, RAW_IPV4):
        raise ValueError(f"{path}: link type {linktype}, neither Ethernet nor raw IP: its packets are "
                         "not read")
    ip = 14 if linktype == ETHERNET else 0
    out, at, end = [], 24, len(data)
    while at + 16 <= end:
        sec, frac, caplen, _ = struct.unpack_from("<IIII", data, at)
        frame, at = data[at + 16:at + 16 + caplen], at + 16 + caplen
        if len(frame) < ip + 20 or (ip and frame[12:14] != b"\x08\x00") or frame[ip] >> 4 != 4:
            continue
        ihl = (frame[ip] & 0x0F) * 4
        size, ip_id = struct.unpack_from("!HH", frame, ip + 2)
        proto = frame[ip + 9]
        src, dst = ".".join(map(str, frame[ip + 12:ip + 16])), ".".join(map(str, frame[ip + 16:ip + 20]))
        sport = dport = 0
        seq, length, l4 = -1, size, ip + ihl
        body = l4 + (8 if proto == UDP else 0)
        if proto in (TCP, UDP) and len(frame) >= l4 + 4:
            sport, dport = struct.unpack_from("!HH", frame, l4)
        if proto == TCP and len(frame) >= l4 + 13:
            seq = struct.unpack_from("!I", frame, l4 + 4)[0]
            length = size - ihl - (frame[l4 + 12] >> 4) * 4
            body = l4 + (frame[l4 + 12] >> 4) * 4
        out.append(Packet(sec * 1_000_000_000 + frac * scale, src, dst, proto, size, ip_id, sport, dport,
                          seq, length, frame[body:body + PAYLOAD_KEY]))
    return out


class LinkCounts(msgspec.Struct):
    """What one direction between two hosts (`src` -> `dst`) saw in one step (summary.json's
    `packets`): packets sent, matched with their receipt, lost, sent while the receiver was
    not capturing, received with no send captured; the matched ones' one-way delay, p50 and
    p99, and the median of their bounds."""

    src: str
    dst: str
    step: int | None
    phase: str
    sent: int = 0
    matched: int = 0
    lost: int = 0
    outside: int = 0
    unmatched: int = 0
    one_way_p50_ns: int | None = None
    one_way_p99_ns: int | None = None
    bound_p50_ns: int | None = None

    def text(self) -> str:
        where = self.phase or "outside the steps"
        said = f"{self.src} -> {self.dst} {where}: {self.sent} sent, {self.matched} matched, {self.lost} lost"
        said += f", {self.outside} outside the receiver's capture" if self.outside else ""
        said += f", {self.unmatched} received unmatched" if self.unmatched else ""
        if self.one_way_p50_ns is not None:
            said += (f"; one way p50 {duration_text(self.one_way_p50_ns)}, "
                     f"p99 {duration_text(self.one_way_p99_ns)}"
                     f" (+- {duration_text(self.bound_p50_ns)})")
        return said


@dataclass
class PacketsResult:
    """What the merge made of the captures: packets.parquet's rows, the counts per direction
    and step, and what it said (dropped by a capture, a capture that did not run)."""

    rows: int = 0
    counts: list[LinkCounts] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    captures: list[CaptureRecord] = field(default_factory=list)


def _placed(fit: ClockFit | None, ts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    local = np.array(ts, dtype=np.int64)
    compiled = CompiledFit.of(fit) if fit is not None and fit.usable else None
    if compiled is None:
        return local, np.zeros_like(local)
    return compiled.to_global(local)


def write_packets(db: duckdb.DuckDBPyConnection, run: Path, out: Path,
                  fits: dict[str, ClockFit]) -> PacketsResult:
    """merged/packets.parquet from every host's captures (none: no file, nothing said)."""
    result = PacketsResult()
    owners: dict[str, str] = {}
    sends: dict[str, list[Packet]] = defaultdict(list)
    receipts: dict[str, list[Packet]] = defaultdict(list)
    capturing: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for host_dir in sorted((run / "hosts").iterdir()) if (run / "hosts").is_dir() else []:
        directory = host_dir / "streams" / PACKETS_DIR
        if not directory.is_dir():
            continue
        try:
            records = read_records(directory)
        except ValueError as exc:
            result.warnings.append(f"packets: {exc}")
            continue
        for record in records:
            result.captures.append(record)
            owners.update({address: record.host for address in record.addresses})
    by_host: dict[str, list[Packet]] = defaultdict(list)
    for record in result.captures:
        if record.error:
            result.warnings.append(f"packets: host {record.host}, {record.interface}: not captured: "
                                   f"{record.error}")
            continue
        if record.dropped:
            result.warnings.append(f"packets: host {record.host}, {record.interface}: the capture dropped "
                                   f"{record.dropped} packet(s) it could not keep up with")
        if record.received is not None and record.captured is not None and \
                record.captured + (record.dropped or 0) < record.received:
            result.warnings.append(f"packets: host {record.host}, {record.interface}: the capture left "
                                   f"{record.received - record.captured - (record.dropped or 0)} packet(s) "
                                   "unread as it stopped")
        if record.limited:
            result.warnings.append(f"packets: host {record.host}, {record.interface}: the capture stopped at "
                                   f"its limit of {record.count} packets")
        if record.started_ns is not None and record.stopped_ns is not None:
            capturing[record.host].append((record.started_ns, record.stopped_ns))
        path = run / "hosts" / record.host / "streams" / PACKETS_DIR / Path(record.file).name
        try:
            by_host[record.host] += read_pcap(path)
        except (OSError, ValueError) as exc:
            result.warnings.append(f"packets: host {record.host}: {exc}")
    if not result.captures:
        return result
    held = _held(run, result)
    for host, packets in by_host.items():
        for p in packets:
            if owners.get(p.src) == host and owners.get(p.dst) not in (None, host):
                sends[host].append(p)
            elif owners.get(p.dst) == host and owners.get(p.src) not in (None, host):
                receipts[host].append(p)
    for host, got in held.items():  # a held packet met its link as the path took it
        sends[host] = _as_held(sends[host], got)
    placed = {}
    for host in set(sends) | set(receipts):
        every = sorted(sends[host] + receipts[host], key=lambda p: p.ts)
        ts, bound = _placed(fits.get(host), [p.ts for p in every])
        placed.update({id(p): (int(t), int(b)) for p, t, b in zip(every, ts, bound, strict=True)})
    steps = windows(db)
    starts = np.array([w[2] for w in steps], dtype=np.int64)

    def step_of(at: int) -> tuple[int | None, str]:
        i = int(np.searchsorted(starts, at, side="right")) - 1
        return (steps[i][0], steps[i][1]) if 0 <= i < len(steps) and at < steps[i][3] else (None, "")

    waiting: dict[tuple[object, ...], list[Packet]] = defaultdict(list)
    for host in receipts:
        for p in sorted(receipts[host], key=lambda p: p.ts):
            waiting[p.key()].append(p)
    taken: dict[tuple[object, ...], int] = defaultdict(int)
    counts: dict[tuple[str, str, int | None], LinkCounts] = {}
    delays: dict[tuple[str, str, int | None], list[tuple[int, int]]] = defaultdict(list)
    rows = []
    for host in sorted(sends):
        for p in sorted(sends[host], key=lambda p: p.ts):
            dst_host = owners[p.dst]
            sent_ts, sent_bound = placed[id(p)]
            step, phase = step_of(sent_ts)
            link = counts.setdefault((host, dst_host, step), LinkCounts(host, dst_host, step, phase))
            link.sent += 1
            key = p.key()
            n = taken[key]
            got = waiting[key][n] if n < len(waiting[key]) else None
            row = _row(p, host, dst_host, step, phase) | {"sent_ts": sent_ts, "sent_bound_ns": sent_bound,
                                                          "matched": got is not None}
            if got is not None:
                taken[key] += 1
                link.matched += 1
                received_ts, received_bound = placed[id(got)]
                row |= {"received_ts": received_ts, "received_bound_ns": received_bound,
                        "one_way_ns": received_ts - sent_ts, "bound_ns": sent_bound + received_bound}
                delays[(host, dst_host, step)].append((received_ts - sent_ts, sent_bound + received_bound))
            elif any(start <= p.ts < stop - LOST_GRACE_NS for start, stop in capturing[dst_host]):
                link.lost += 1
            else:
                link.outside += 1
            rows.append(row)
    for key, got in waiting.items():
        for p in got[taken[key]:]:
            src_host, dst_host = owners[p.src], owners[p.dst]
            received_ts, received_bound = placed[id(p)]
            step, phase = step_of(received_ts)
            link = counts.setdefault((src_host, dst_host, step), LinkCounts(src_host, dst_host, step, phase))
            link.unmatched += 1
            rows.append(_row(p, src_host, dst_host, step, phase) | {"received_ts": received_ts,
                                                                   "received_bound_ns": received_bound})
    rows.sort(key=lambda r: r["sent_ts"] if r["sent_ts"] is not None else r["received_ts"])
    pq.write_table(pa.Table.from_pylist(rows, schema=PACKETS), out / "packets.parquet")
    result.rows = len(rows)
    for key, said in delays.items():
        one_way = np.array([d for d, _ in said])
        counts[key].one_way_p50_ns = int(np.percentile(one_way, 50))
        counts[key].one_way_p99_ns = int(np.percentile(one_way, 99))
        counts[key].bound_p50_ns = int(np.median([b for _, b in said]))
    result.counts = sorted(counts.values(), key=lambda c: (c.src, c.dst, -1 if c.step is None else c.step))
    return result


def _row(p: Packet, src: str, dst: str, step: int | None, phase: str) -> dict[str, object]:
    """A packets.parquet row of `p`, neither end placed yet (nor matched)."""
    return {"src_host": src, "dst_host": dst, "proto": p.flow().split()[0], "flow": p.flow(), "size": p.size,
            "ip_id": p.ip_id, "seq": p.seq if p.seq >= 0 else None, "step": step, "phase": phase or None,
            "sent_ts": None, "sent_bound_ns": None, "received_ts": None, "received_bound_ns": None,
            "one_way_ns": None, "bound_ns": None, "matched": False}


def _held(run: Path, result: PacketsResult) -> dict[str, list[Packet]]:
    """Each host's packets its user-space link path held or dropped, as they met the link."""
    out: dict[str, list[Packet]] = {}
    for host in sorted({r.host for r in result.captures}):
        for path in sorted((run / "hosts" / host / "streams" / PACKETS_DIR).glob("packets.*.held.pcap")):
            try:
                out.setdefault(host, []).extend(read_pcap(path))
            except (OSError, ValueError) as exc:
                result.warnings.append(f"packets: host {host}: {exc}")
    return out


def _as_held(sent: list[Packet], held: list[Packet]) -> list[Packet]:
    """`sent` (as the interface saw them leave) with each packet the link path held given the
    instant it met the link, the n-th of a key with the n-th held; and each one it dropped
    for the link's loss, which never left, as sent then (in a flow the capture took). A copy
    leaves at its due instant: its interface stamp would call the emulated delay the sender's
    own time."""
    # a deque per key: a bulk transfer's pure ACKs share one key, thousands of them
    taken: dict[tuple[object, ...], deque[Packet]] = defaultdict(deque)
    for p in sorted(held, key=lambda p: p.ts):
        taken[p.key()].append(p)
    out = []
    for p in sorted(sent, key=lambda p: p.ts):
        got = taken.get(p.key())
        out.append(got.popleft() if got else p)
    # The path holds every packet toward a conditioned peer, the capture's filter takes some
    # flows: one held and never seen leaving counts only in a flow the capture took.
    flows = {p.flow() for p in sent}
    return out + [p for rest in taken.values() for p in rest if p.flow() in flows]


def packet_lines(counts: list[LinkCounts]) -> list[str]:
    """The merge's and `report`'s lines: each direction's packets per phase."""
    if not counts:
        return []
    return ["packets (each sent packet matched with its receipt, per direction and phase):",
            *(f"  {c.text()}" for c in counts)]
