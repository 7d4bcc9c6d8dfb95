"""The packets' merge on captures written here (analysis/packets.py): each packet's send on
one host matched with its receipt on the other by what names it at both ends (a datagram's
ports and payload head beside its IP ID, which Linux leaves 0 for an unconnected socket; a
segment's sequence number and length), the n-th of a key with the n-th; a send the receiver
was capturing for and never saw is lost, one after its capture ended is outside it, and a
receipt nobody saw sent is unmatched."""

import struct

import duckdb
import pyarrow.parquet as pq
from netspec.analysis.packets import packet_lines, read_pcap, write_packets
from netspec.protocol.packets import PACKETS_DIR, CaptureRecord, write_record

A, B = "10.0.0.1", "10.0.0.2"
T0 = 1_800_000_000_000_000_000


def frame(src: str, dst: str, proto: int, payload: bytes, sport=5000, dport=9500, ip_id=0, seq=0) -> bytes:
    l4 = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) if proto == 17 else \
        struct.pack("!HHIIBBHHH", sport, dport, seq, 0, 5 << 4, 0x18, 1024, 0, 0)
    body = l4 + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), ip_id, 0x4000, 64, proto, 0,
                     bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))))
    return b"\x00" * 12 + b"\x08\x00" + ip + body


def pcap(path, packets: list[tuple[int, bytes]]) -> None:
    out = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1)]
    for ts, data in packets:
        head = struct.pack("<IIII", ts // 1_000_000_000, ts % 1_000_000_000, len(data), len(data))
        out.append(head + data)
    path.write_bytes(b"".join(out))


def capture(run, host: str, address: str, packets, stopped: int) -> None:
    directory = run / "hosts" / host / "streams" / PACKETS_DIR
    directory.mkdir(parents=True)
    pcap(directory / "packets.1.eth0.pcap", packets)
    write_record(directory, CaptureRecord(host=host, interface="eth0", file="packets.1.eth0.pcap",
                                          addresses=[address], started_ns=T0, stopped_ns=stopped,
                                          captured=len(packets), received=len(packets), dropped=0))


def test_sends_are_matched_with_their_receipts_and_the_rest_counted_as_they_went(tmp_path):
    us = 1_000
    datagrams = [frame(A, B, 17, n.to_bytes(4, "big") * 8) for n in range(4)]  # IP ID 0, all four
    segment = frame(A, B, 6, b"x" * 100, sport=40000, dport=9501, seq=7)
    sent = [(T0 + 1000 * us * n, d) for n, d in enumerate(datagrams)] + [(T0 + 5000 * us, segment),
                                                                          (T0 + 6000 * us, segment)]
    late = (T0 + 2_000_000 * us, frame(A, B, 17, b"late" * 8))  # after b stopped capturing
    capture(tmp_path, "a", A, [*sent, late], stopped=T0 + 3_000_000 * us)
    # b got datagrams 3, 0 and 1 (2 lost), the segment and its copy sent again, and one nobody sent
    got = [(T0 + 3000 * us + 40 * us, datagrams[3]), (T0 + 30 * us, datagrams[0]),
           (T0 + 1000 * us + 20 * us, datagrams[1]), (T0 + 5000 * us + 10 * us, segment),
           (T0 + 6000 * us + 12 * us, segment), (T0 + 7000 * us, frame(A, B, 17, b"ghost" * 8))]
    capture(tmp_path, "b", B, got, stopped=T0 + 1_000_000 * us)
    assert [p.seq for p in read_pcap(tmp_path / "hosts/b/streams/packets/packets.1.eth0.pcap")][3:5] == [7, 7]
    db = duckdb.connect()
    db.execute(f"CREATE TABLE phases AS SELECT 0 AS step, 'run' AS phase, {T0} AS entered, "
               f"{T0 + 10_000_000 * us} AS acked")
    result = write_packets(db, tmp_path, tmp_path, fits={})
    rows = pq.read_table(tmp_path / "packets.parquet").to_pylist()
    one_way = [(r["proto"], r["one_way_ns"]) for r in rows if r["matched"]]
    assert one_way == [("udp", 30 * us), ("udp", 20 * us), ("udp", 40 * us), ("tcp", 10 * us),
                       ("tcp", 12 * us)]
    [a_to_b] = [c for c in result.counts if (c.src, c.dst) == ("a", "b")]
    assert (a_to_b.sent, a_to_b.matched, a_to_b.lost, a_to_b.outside, a_to_b.unmatched) == (7, 5, 1, 1, 1)
    assert a_to_b.one_way_p50_ns == 20 * us and a_to_b.phase == "run"
    assert packet_lines(result.counts)[1] == (
        "  a -> b run: 7 sent, 5 matched, 1 lost, 1 outside the receiver's capture, 1 received unmatched; "
        "one way p50 20 us, p99 39.6 us (+- 0 ns)")


def test_a_pairs_interval_is_split_by_the_packet_that_carried_it():
    from netspec.analysis.packetsplit import splits

    us = 1_000
    db = duckdb.connect()
    db.execute(f"CREATE TABLE phases AS SELECT 3 AS step, 'run' AS phase, {T0} AS entered")
    # two messages a -> b: sent by the program at 0 and 10 ms, read at b 2.1 and 12.3 ms on
    db.execute(f"""CREATE TABLE intervals AS SELECT * FROM (VALUES
        ('to_b', 'a', 'b', {T0}, {T0 + 2100 * us}, {2100 * us}, 'pair'),
        ('to_b', 'a', 'b', {T0 + 10_000 * us}, {T0 + 12_300 * us}, {2300 * us}, 'pair'),
        ('local', 'a', 'a', {T0}, {T0 + 5 * us}, {5 * us}, 'pair'))
        AS t(name, start_host, end_host, start_ts, end_ts, global_ns, source)""")
    # each carried by a packet that left 40 us after its send and took 1 ms, and a stray one
    db.execute(f"""CREATE TABLE packets AS SELECT * FROM (VALUES
        ('a', 'b', {T0 + 40 * us}, {T0 + 1040 * us}, {1000 * us}, true),
        ('a', 'b', {T0 + 10_040 * us}, {T0 + 11_040 * us}, {1000 * us}, true),
        ('b', 'a', {T0 + 50 * us}, {T0 + 60 * us}, {10 * us}, true))
        AS t(src_host, dst_host, sent_ts, received_ts, one_way_ns, matched)""")
    [split] = splits(db)
    assert (split.pair, split.src, split.dst, split.phase, split.instances, split.carried) == \
        ("to_b", "a", "b", "run", 2, 2)
    assert (split.user_ns, split.sender_ns, split.network_ns, split.receiver_ns) == \
        (2200 * us, 40 * us, 1000 * us, 1160 * us)
    assert split.text() == ("to_b a -> b run: user 2.2 ms = sender 40 us + network 1 ms + receiver 1.16 ms "
                            "(medians; 2 of 2 carried by a captured packet)")
