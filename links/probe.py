"""What this host's kernel and tools offer link conditions, found by trying each on scratch
ground and leaving nothing behind: in a network namespace of its own (`unshare --net`, gone
with the shell that made it) where the daemon may make one, else on a veth pair named for
the daemon's pid, deleted after. Found once per daemon: a kernel does not change under it."""

from __future__ import annotations

import functools
import os
import subprocess

from netspec.protocol.links import LinkOffer

from .names import TOOL_S, binary

CAP_NET_ADMIN, CAP_NET_RAW = 12, 13
BINARIES = ("tc", "nft", "iptables", "ip", "unshare")
# Each line: a word the probe prints when the thing works. Run by sh in a namespace (or on a
# scratch veth) where nothing else lives; the iptables chain and nft table are named for the
# probe all the same.
_CHECKS = r"""
q() {{ "$@" >/dev/null 2>&1; }}
D={dev}
{make}
q tc qdisc add dev $D root handle 1: htb && echo htb && q tc qdisc del dev $D root
q tc qdisc add dev $D root tbf rate 1mbit burst 10k latency 50ms && echo tbf && q tc qdisc del dev $D root
q tc qdisc add dev $D root netem delay 1ms && echo netem && q tc qdisc del dev $D root
T=netspec_probe_{pid}
q nft add table netdev $T \
  && q nft add chain netdev $T e "{{ type filter hook egress device $D priority 0; }}" \
  && q nft add rule netdev $T e ip daddr 192.0.2.1 numgen random mod 100 "<" 5 drop && echo nftables
q nft delete table netdev $T
C=NETSPEC_probe_{pid}
if q iptables -N $C; then
  echo iptables
  q iptables -A $C -d 192.0.2.1 -m statistic --mode random --probability 0.05 -j DROP && echo statistic
  q iptables -A $C -d 192.0.2.1 -j NFQUEUE --queue-num 1 --queue-bypass && echo nfqueue
  q iptables -F $C; q iptables -X $C
fi
{unmake}
"""


def _capable(capability: int) -> bool:
    """Whether this process holds `capability` in its effective set."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> capability & 1)
    except OSError:
        pass
    return False


@functools.cache
def offer() -> LinkOffer:
    """What this host offers (cached for the daemon's life). Never raises: what could not be
    tried is a plain no, and what a try met is said in `notes`."""
    binaries = {name: binary(name) for name in BINARIES}
    found = LinkOffer(cap_net_admin=_capable(CAP_NET_ADMIN), binaries=binaries)
    if not found.cap_net_admin:
        found.notes.append("netspecd lacks CAP_NET_ADMIN: no qdisc, rule or queue can be installed")
        return found
    pid = os.getpid()
    path = "/usr/sbin:/sbin:/usr/bin:/bin:" + os.environ.get("PATH", "")
    isolated = binaries["unshare"] is not None and _try(["unshare", "--net", "true"], path)
    if isolated:
        script = _CHECKS.format(dev="lo", make="ip link set lo up", unmake="", pid=pid)
        argv = ["unshare", "--net", "sh", "-c", script]
    else:
        dev = f"nsp{pid % 10**8}"
        script = _CHECKS.format(dev=dev, make=f"ip link add {dev} type veth peer name {dev}b || exit 0",
                                unmake=f"ip link del {dev}", pid=pid)
        argv = ["sh", "-c", script]
        found.notes.append("no network namespace could be made: probed on a scratch veth pair")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_S,
                              env={**os.environ, "PATH": path}, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        found.notes.append(f"the probe did not run: {exc}")
        return found
    works = set(done.stdout.split())
    for name in ("netem", "htb", "tbf", "nftables", "iptables", "statistic", "nfqueue"):
        setattr(found, name, name in works)
    if found.nfqueue and not _capable(CAP_NET_RAW):
        # The user-space path sends each held packet's copy through a raw socket (nfqueue.py).
        found.nfqueue = False
        found.notes.append("netspecd lacks CAP_NET_RAW: netspec's user-space path cannot send its "
                           "copies, so it is not offered")
    return found


def _try(argv: list[str], path: str) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=TOOL_S, check=False,
                              env={**os.environ, "PATH": path}).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
