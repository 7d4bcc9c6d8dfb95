import json
import sys
import textwrap

from support import session_run_id

# In a namespace of its own: a thread sends numbered datagrams out of eth0 back to back, each
# stamped just before and just after its send, while a LinkSet cuts the peer they go to; its
# veth's other end (eth1) captures what left. The cut took effect between the last datagram
# through's first stamp and the first one dropped's last.
CUT_WHILE_SENDING = textwrap.dedent("""\
    import json, socket, struct, sys, threading, time
    from netspec.links import LinkSet
    from netspec.protocol.links import LinkCondition, LinkOffer, LinkRule
    links = LinkSet(sys.argv[1], "a", have=LinkOffer(cap_net_admin=True, nftables=True))
    capture = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0800))
    capture.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE: none lost to the capture
    capture.bind(("eth1", 0)); capture.settimeout(0.5)
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stamps, seen, stop = [], set(), threading.Event()
    def send():
        while not stop.is_set() and len(stamps) < 200_000:
            before = time.time_ns()
            out.sendto(struct.pack("!q", len(stamps)), ("10.250.77.2", 9))
            stamps.append((before, time.time_ns()))
    def receive():
        while True:
            try:
                frame = capture.recv(256)
            except TimeoutError:
                return
            if len(frame) >= 42 + 8 and frame[14 + 9] == 17:
                seen.add(struct.unpack_from("!q", frame, 42)[0])
    def sent(count):  # a wait with a deadline: the sender's count reached
        deadline = time.monotonic() + 30
        while len(stamps) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"sent {len(stamps)} of {count} in 30 s")
            time.sleep(0.001)
    receiver = threading.Thread(target=receive); receiver.start()
    sender = threading.Thread(target=send); sender.start()
    sent(2000)
    applied = links.apply([LinkRule(peer="b", address="10.250.77.2",
                                    condition=LinkCondition(partition=True))])
    sent(len(stamps) + 2000)
    stop.set(); sender.join(); receiver.join(); links.close()
    print(json.dumps({"began": applied.began_ns, "applied": applied.applied_ns, "at": applied.at_ns,
                      "half": applied.half_ns, "stamps": stamps, "seen": sorted(seen)}))
    """)


def test_a_partition_takes_effect_inside_the_window_its_change_records(veth_netns):
    _in = veth_netns.run
    mac = json.loads(_in("ip", "-j", "link", "show", "eth1"))[0]["address"]
    _in("ip", "neigh", "add", "10.250.77.2", "lladdr", mac, "dev", "eth0", "nud", "permanent")
    got = json.loads(_in(sys.executable, "-c", CUT_WHILE_SENDING, session_run_id("window")))
    stamps, seen = got["stamps"], set(got["seen"])
    last = max(seen)  # the last one through: every one after it was dropped
    assert 2000 <= last < len(stamps) - 1000, (last, len(stamps))
    # When the cut took effect, as the datagrams saw it: after the last one through was sent,
    # before the next (the first dropped) had returned.
    earliest, latest = stamps[last][0], stamps[last + 1][1]
    # The recorded window holds that instant: its midpoint within its half-width of it.
    assert got["began"] <= latest and earliest <= got["applied"], got
    assert got["at"] - got["half"] <= latest and earliest <= got["at"] + got["half"]
    assert got["half"] < 500_000_000  # the change is one nft process, not the whole apply
