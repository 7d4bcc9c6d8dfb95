"""Real hosts on one machine: network namespaces on a bridge, each with its own address and
its own sshd (Debian's openssh-server), for netspec's multi-host tests and benchmarks.

    python tests/nethosts.py up 3 [--state DIR]     # build netspec-h1..h3, print how to use them
    python tests/nethosts.py down [--state DIR]     # tear everything down

Needs root, `ip` (iproute2) and /usr/sbin/sshd. Host i lives in namespace nsh<i> at
10.199.0.<10+i>, behind veth nsh<i>v on bridge nshbr (10.199.0.1). The state directory
holds the hosts' keys and sshd configs, a client key that every host accepts, a
known_hosts file and an ssh_config naming the hosts netspec-h1.. (point
NETSPEC_SSH_CONFIG at it). The hosts share this machine's file system, as hosts with an
NFS home would; with --own-homes each host is reached as a user of its own
(netspec-h<i>), so none shares a home with another.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "nsh"
BRIDGE = f"{PREFIX}br"
SUBNET = "10.199.0"
SSHD = "/usr/sbin/sshd"
DEFAULT_STATE = Path("/tmp/netspec-hosts")


@dataclass(frozen=True)
class NetHost:
    index: int
    state: Path

    @property
    def alias(self) -> str:
        return f"netspec-h{self.index}"

    @property
    def netns(self) -> str:
        return f"{PREFIX}{self.index}"

    @property
    def address(self) -> str:
        return f"{SUBNET}.{10 + self.index}"

    @property
    def dir(self) -> Path:
        return self.state / f"h{self.index}"

    def sshd_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int((self.dir / "sshd.pid").read_text())
        return None

    def sshd_answers(self) -> bool:
        try:
            socket.create_connection((self.address, 22), timeout=1).close()
        except OSError:
            return False
        return True

    def stop_sshd(self) -> None:
        pid = self.sshd_pid()
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def start_sshd(self) -> None:
        _run("ip", "netns", "exec", self.netns, SSHD, "-f", str(self.dir / "sshd_config"),
             "-E", str(self.dir / "sshd.log"))
        _wait_listening(self.address, 22)

    def kill_everything(self) -> None:
        """Kill every process in the namespace: the host is lost."""
        pids = subprocess.run(["ip", "netns", "pids", self.netns], capture_output=True,
                              text=True).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def why_unavailable() -> str | None:
    """Why namespaced hosts cannot be built here, or None if they can."""
    if os.geteuid() != 0:
        return "namespaced test hosts need root (ip netns, veth, a bridge, sshd)"
    for tool in ("ip", SSHD, "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"namespaced test hosts need {tool} (apt-get install iproute2 openssh-server)"
    return None


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def _wait_listening(address: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=1):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on {address}:{port} after {timeout:g} s")
        time.sleep(0.05)


def up(count: int, state: Path = DEFAULT_STATE, own_homes: bool = False) -> list[NetHost]:
    """Build `count` hosts (tearing down any left over) and return them once their sshd
    accepts connections. With `own_homes`, each host is logged into as a user of its own
    (netspec-h<i>, created here, home in /home), so that no two hosts share a home."""
    down(state)
    state.mkdir(parents=True)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "netspec-test", "-f", str(state / "id_ed25519"))
    shutil.copy(state / "id_ed25519.pub", state / "authorized_keys")
    _run("ip", "link", "add", BRIDGE, "type", "bridge")
    _run("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")
    hosts = [NetHost(i, state) for i in range(1, count + 1)]
    known, config = [], []
    for h in hosts:
        h.dir.mkdir()
        _run("ip", "netns", "add", h.netns)
        _run("ip", "link", "add", f"{h.netns}v", "type", "veth", "peer", "name", "eth0", "netns", h.netns)
        _run("ip", "link", "set", f"{h.netns}v", "master", BRIDGE, "up")
        _run("ip", "-n", h.netns, "addr", "add", f"{h.address}/24", "dev", "eth0")
        _run("ip", "-n", h.netns, "link", "set", "eth0", "up")
        _run("ip", "-n", h.netns, "link", "set", "lo", "up")
        _run("ip", "-n", h.netns, "route", "add", "default", "via", f"{SUBNET}.1")
        key = h.dir / "ssh_host_ed25519_key"
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        (h.dir / "sshd_config").write_text(
            f"ListenAddress {h.address}:22\nHostKey {key}\nPidFile {h.dir / 'sshd.pid'}\n"
            f"AuthorizedKeysFile .ssh/authorized_keys {state / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            "StrictModes no\nAllowTcpForwarding yes\nSubsystem sftp internal-sftp\n"
            "MaxStartups 100\nLogLevel ERROR\n")
        known.append(f"{h.address} {Path(f'{key}.pub').read_text().split(' ', 2)[0]} "
                     f"{Path(f'{key}.pub').read_text().split()[1]}")
        user = "root"
        if own_homes:
            user = h.alias
            # "*": no password, yet not locked ("!"), which sshd would refuse without PAM.
            _run("useradd", "--create-home", "--shell", "/bin/bash", "--password", "*", user)
            # In the user's own home: sshd reads the keys as the user, who may not be able
            # to reach the state directory.
            ssh_dir = Path("/home") / user / ".ssh"
            ssh_dir.mkdir(mode=0o700)
            shutil.copy(state / "authorized_keys", ssh_dir / "authorized_keys")
            _run("chown", "-R", f"{user}:{user}", str(ssh_dir))
        config.append(f"Host {h.alias}\n  HostName {h.address}\n  User {user}\n"
                      f"  IdentityFile {state / 'id_ed25519'}\n"
                      f"  UserKnownHostsFile {state / 'known_hosts'}\n")
    (state / "known_hosts").write_text("\n".join(known) + "\n")
    (state / "ssh_config").write_text("\n".join(config))
    for h in hosts:
        h.start_sshd()
    return hosts


def down(state: Path = DEFAULT_STATE) -> None:
    """Remove every host, its user if it had one, and the bridge; quiet about what is
    already gone."""
    for netns in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                text=True).stdout.split("\n"):
        name = netns.split(" ")[0]
        if name.startswith(PREFIX) and name[len(PREFIX):].isdigit():
            NetHost(int(name[len(PREFIX):]), state).kill_everything()
            # The veth goes with the namespace only once the kernel gets round to it.
            subprocess.run(["ip", "link", "del", f"{name}v"], capture_output=True)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
    for line in Path("/etc/passwd").read_text().splitlines():
        user = line.split(":")[0]
        if user.startswith("netspec-h") and user[len("netspec-h"):].isdigit():
            subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True)
            subprocess.run(["userdel", "--remove", user], capture_output=True)
    shutil.rmtree(state, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("count", type=int, nargs="?", default=3)
    parser.add_argument("--state", type=Path, default=DEFAULT_STATE)
    parser.add_argument("--own-homes", action="store_true",
                        help="log into each host as a user of its own (no shared home)")
    args = parser.parse_args()
    reason = why_unavailable()
    if reason:
        print(f"nethosts: {reason}", file=sys.stderr)
        return 2
    if args.action == "down":
        down(args.state)
        return 0
    hosts = up(args.count, args.state, args.own_homes)
    for h in hosts:
        print(f"{h.alias}: {h.address} (namespace {h.netns})")
    print(f"export NETSPEC_SSH_CONFIG={args.state / 'ssh_config'}   # then use hosts: "
          f"{{h1: {{ssh: {hosts[0].alias}}}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
