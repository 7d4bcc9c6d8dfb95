"""Real hosts on one machine: network namespaces on a bridge, each with its own address and
its own sshd (Debian's openssh-server), for netspec's multi-host tests and benchmarks.

    python tests/nethosts.py up 3 [--prefix P] [--state DIR] [--own-homes]
    python tests/nethosts.py down [--prefix P] [--state DIR]

Needs root, `ip` (iproute2) and /usr/sbin/sshd. Every name a set of hosts takes from the
machine carries its prefix P (default "nsh"; the tests use a random one per session), so
sets built by different people or test suites live side by side: host i lives in namespace
Ph<i>, behind veth Ph<i>v on bridge Pbr, at address .(10+i) of a /24 subnet that no interface
or route of this machine uses when the set is built (the bridge takes .1). Building and
choosing a subnet happen under one lock, and every set is listed in /run/netspec-nethosts/
with its owner's pid: a set whose owner died (a test suite killed by SIGKILL) is removed by
the next `up`. A set built from the command line has no owner and stays until `down`.

Traffic between the hosts crosses the bridge, which with br_netfilter goes through
iptables' FORWARD chain: where dockerd set its policy to DROP, that traffic is cut. So
`up` allows the bridge's own forwarding by rules commented `netspec-nethosts-P`, in
DOCKER-USER where it exists (dockerd keeps that chain first in FORWARD) or else in FORWARD,
and `down` removes them; where iptables is missing, it says so if the bridge does not
forward.

The state directory (default /tmp/netspec-hosts-P) holds the hosts' keys and sshd configs,
a client key that every host accepts, a known_hosts file, an ssh_config naming the hosts
netspec-h1.. (point NETSPEC_SSH_CONFIG at it) and home/, the home directory of the set's
logins: the hosts share it, as hosts with an NFS home would, and no other set sees it.
With --own-homes each host is reached as a user of its own (P-h<i>, home in /home), so
none shares a home with another.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import ipaddress
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
REGISTRY = Path("/run/netspec-nethosts")
# Candidate subnets: 10.(200..249).x.0/24, tried in a random order.
SUBNET_SECOND = range(200, 250)
MAX_PREFIX = 8  # an interface name is at most 15 bytes: P + "h" + host index + "v"


@dataclass(frozen=True)
class HostSet:
    """The names one set of hosts takes from the machine."""

    prefix: str
    subnet: str  # the first three octets of its /24
    state: Path
    own_homes: bool = False
    shared_home: Path | None = None  # the logins' home; state/home when None

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def ssh_config(self) -> Path:
        return self.state / "ssh_config"

    @property
    def home(self) -> Path:
        return self.shared_home or self.state / "home"

    def host(self, index: int) -> NetHost:
        return NetHost(index, self)


@dataclass(frozen=True)
class NetHost:
    index: int
    set: HostSet

    @property
    def state(self) -> Path:
        return self.set.state

    @property
    def alias(self) -> str:
        """Its name in the set's ssh_config."""
        return f"netspec-h{self.index}"

    @property
    def netns(self) -> str:
        return f"{self.set.prefix}h{self.index}"

    @property
    def address(self) -> str:
        return f"{self.set.subnet}.{10 + self.index}"

    @property
    def user(self) -> str:
        return f"{self.set.prefix}-h{self.index}" if self.set.own_homes else "root"

    @property
    def home(self) -> Path:
        return Path("/home") / self.user if self.set.own_homes else self.set.home

    @property
    def dir(self) -> Path:
        return self.state / f"h{self.index}"

    @property
    def known_hosts_line(self) -> str:
        algorithm, key = (self.dir / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        return f"{self.address} {algorithm} {key}"

    def ssh_config_entry(self, known_hosts: Path | None = None) -> str:
        """Its entry for an ssh_config, with the set's known_hosts or the one given."""
        return (f"Host {self.alias}\n  HostName {self.address}\n  User {self.user}\n"
                f"  IdentityFile {self.state / 'id_ed25519'}\n"
                f"  UserKnownHostsFile {known_hosts or self.state / 'known_hosts'}\n")

    def sshd_pid(self) -> int | None:
        with contextlib.suppress(OSError, ValueError):
            return int((self.dir / "sshd.pid").read_text())
        return None

    def sshd_answers(self) -> bool:
        """A real SSH session: handshake, host key, the client key, and a command run."""
        import paramiko

        client = paramiko.SSHClient()
        try:
            client.load_host_keys(str(self.dir / "known_hosts"))
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
            client.connect(self.address, username=self.user, key_filename=str(self.state / "id_ed25519"),
                           timeout=5, banner_timeout=5, auth_timeout=5, allow_agent=False,
                           look_for_keys=False)
            _, stdout, _ = client.exec_command("true", timeout=5)
            return stdout.channel.recv_exit_status() == 0
        except (OSError, paramiko.SSHException):
            return False
        finally:
            client.close()

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
        """Kill every process in the namespace at once: the host is lost. All are stopped
        before any is killed: the hosts share this machine's process table, so a daemon that
        saw its sshd die first would reset its run, and a reset ends the run's processes on
        every host, which a real lost host cannot do."""
        pids = _netns_pids(self.netns)
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)


def why_unavailable() -> str | None:
    """Why namespaced hosts cannot be built here, or None if they can."""
    if os.geteuid() != 0:
        return "namespaced test hosts need root (ip netns, veth, a bridge, sshd)"
    for tool in ("ip", SSHD, "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"namespaced test hosts need {tool} (apt-get install iproute2 openssh-server)"
    return None


def random_prefix() -> str:
    return "nt" + secrets.token_hex(3)[:5]


def default_state(prefix: str) -> Path:
    return Path(f"/tmp/netspec-hosts-{prefix}")


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")


def _netns_pids(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _wait_listening(address: str, port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=1):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on {address}:{port} after {timeout:g} s")
        time.sleep(0.05)


@contextlib.contextmanager
def _registry_lock() -> Iterator[None]:
    REGISTRY.mkdir(mode=0o755, exist_ok=True)
    with open(REGISTRY / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def owner_alive(pid: int | None) -> bool:
    """Whether the owner is running: a zombie (killed, not yet reaped) is not."""
    if pid is None:
        return True  # built by hand: kept until `down`
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _registered() -> list[dict]:
    found = []
    for path in REGISTRY.glob("*.json"):
        with contextlib.suppress(OSError, ValueError):
            found.append(json.loads(path.read_text()))
    return found


def _subnets_in_use() -> set[ipaddress.IPv4Network]:
    used = set()
    for argv in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        for word in subprocess.run(argv, capture_output=True, text=True).stdout.split():
            with contextlib.suppress(ValueError):
                if "/" in word or word.count(".") == 3:
                    used.add(ipaddress.ip_network(word, strict=False))
    return used


def _free_subnet(taken: set[str]) -> str:
    used = _subnets_in_use()
    candidates = [f"10.{b}.{c}" for b in SUBNET_SECOND for c in range(256)]
    secrets.SystemRandom().shuffle(candidates)
    for subnet in candidates:
        net = ipaddress.ip_network(f"{subnet}.0/24")
        if subnet not in taken and not any(net.overlaps(u) for u in used if u.prefixlen > 0):
            return subnet
    raise RuntimeError("no free /24 in 10.200.0.0-10.249.255.0 for test hosts")


def up(count: int, prefix: str | None = None, state: Path | None = None, own_homes: bool = False,
       owner: int | None = None, home: Path | None = None) -> list[NetHost]:
    """Build `count` hosts (tearing down a set of the same prefix left over) and return them
    once each sshd serves a real SSH session.

    Args:
        prefix: what every name taken from the machine starts with; random when None.
        state: the state directory; /tmp/netspec-hosts-<prefix> when None.
        own_homes: log into each host as a user of its own (<prefix>-h<i>, home in /home).
        owner: the pid whose death lets the next `up` remove the set (None: only `down` does).
        home: the home of the set's logins, which sets may share (what netspec installs
            there is installed once); the state directory's home/ when None.
    """
    prefix = prefix or random_prefix()
    if len(prefix) > MAX_PREFIX or not prefix.isalnum():
        raise ValueError(f"prefix {prefix!r}: at most {MAX_PREFIX} letters and digits")
    with _registry_lock():
        _reap_locked(also=prefix)
        hosts_set = HostSet(prefix, _free_subnet({e["subnet"] for e in _registered()}),
                            state or default_state(prefix), own_homes, home)
        (REGISTRY / f"{prefix}.json").write_text(json.dumps(
            {"prefix": prefix, "subnet": hosts_set.subnet, "state": str(hosts_set.state), "owner": owner,
             "count": count, "own_homes": own_homes}))
        try:
            hosts = _build(hosts_set, count)
        except BaseException:
            _down_locked(prefix, hosts_set.state)
            raise
    return hosts


def _build(hs: HostSet, count: int) -> list[NetHost]:
    shutil.rmtree(hs.state, ignore_errors=True)
    hs.state.mkdir(parents=True)
    hs.home.mkdir(mode=0o700, exist_ok=True)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"netspec-test-{hs.prefix}",
         "-f", str(hs.state / "id_ed25519"))
    shutil.copy(hs.state / "id_ed25519.pub", hs.state / "authorized_keys")
    _run("ip", "link", "add", hs.bridge, "type", "bridge")
    _run("ip", "addr", "add", f"{hs.subnet}.1/24", "dev", hs.bridge)
    _run("ip", "link", "set", hs.bridge, "up")
    allow_forwarding(hs)
    hosts = [hs.host(i) for i in range(1, count + 1)]
    for h in hosts:
        add(h)
    (hs.state / "known_hosts").write_text("".join(h.known_hosts_line + "\n" for h in hosts))
    hs.ssh_config.write_text("\n".join(h.ssh_config_entry() for h in hosts))
    for h in hosts:
        start_and_check(h)
    return hosts


FORWARD_CHAINS = ("DOCKER-USER", "FORWARD")


def rule_comment(prefix: str) -> str:
    return f"netspec-nethosts-{prefix}"


def _iptables(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True)


def forward_chain() -> str | None:
    """Where the set's rules go: DOCKER-USER if dockerd made it, else FORWARD (None: no iptables)."""
    if shutil.which("iptables") is None:
        return None
    return next(c for c in FORWARD_CHAINS if c == "FORWARD" or _iptables("-S", c).returncode == 0)


def allow_forwarding(hs: HostSet) -> None:
    """Accept what crosses the set's bridge, in and out, ahead of whatever dockerd put there."""
    chain = forward_chain()
    if chain is None:
        policy = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")
        if policy.is_file() and policy.read_text().strip() == "1":
            print(f"nethosts: no iptables to allow bridge {hs.bridge}'s forwarding: if FORWARD's policy is "
                  "DROP (dockerd sets it), its hosts cannot reach each other", file=sys.stderr)
        return
    for direction in ("-i", "-o"):
        _run("iptables", "-w", "5", "-I", chain, direction, hs.bridge, "-m", "comment",
             "--comment", rule_comment(hs.prefix), "-j", "ACCEPT")


def forwarding_rules(prefix: str) -> list[tuple[str, str]]:
    """(chain, rule) of every rule named for the set, as `iptables -S` shows it."""
    if shutil.which("iptables") is None:
        return []
    return [(chain, line) for chain in FORWARD_CHAINS for line in _iptables("-S", chain).stdout.splitlines()
            if line.startswith("-A ") and rule_comment(prefix) in shlex.split(line)]


def remove_forwarding(prefix: str) -> None:
    for chain, line in forwarding_rules(prefix):
        _iptables("-D", chain, *shlex.split(line)[2:])


def set_sshd_env(h: NetHost, **env: str) -> None:
    """Restart the host's sshd with `env` set in its sessions (beside the set's HOME)."""
    config = h.dir / "sshd_config"
    text = config.read_text().splitlines()
    values = [line.removeprefix("SetEnv ") for line in text if line.startswith("SetEnv ")]
    values += [f"{k}={v}" for k, v in env.items()]
    config.write_text("\n".join([*(line for line in text if not line.startswith("SetEnv ")),
                                 "SetEnv " + " ".join(values)]) + "\n")
    pid = h.sshd_pid()
    h.stop_sshd()
    deadline = time.monotonic() + 10
    while pid and os.path.exists(f"/proc/{pid}"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{h.alias}: sshd did not stop within 10 s")
        time.sleep(0.05)
    start_and_check(h)


@dataclass(frozen=True)
class Engine:
    """A second Docker engine in a host's namespace, everything of its own named `name`:
    its data, exec root, pidfile and socket under `dir`, its bridge in the namespace, its
    containerd namespaces. Its iptables rules are the namespace's, not the machine's."""

    host: NetHost
    name: str
    dir: Path
    process: subprocess.Popen

    @property
    def url(self) -> str:
        return f"unix://{self.dir / 'docker.sock'}"

    @property
    def bridge(self) -> str:
        return self.name[-15:]


def tls_files(directory: Path, address: str) -> dict[str, Path]:
    """A CA of its own, a server certificate for `address` and a client certificate, as
    PEM files in `directory`: what dockerd's --tlsverify and a client need."""
    import datetime
    import ipaddress as ip

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "netspec test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    files = {"ca": directory / "ca.pem"}
    files["ca"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    usages = {"server": ExtendedKeyUsageOID.SERVER_AUTH, "client": ExtendedKeyUsageOID.CLIENT_AUTH}
    for who, usage in usages.items():
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"netspec test {who}")]))
                .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if who == "server":
            cert = cert.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ip.ip_address(address))]),
                                      critical=False)
        files[f"{who}_cert"] = directory / f"{who}-cert.pem"
        files[f"{who}_key"] = directory / f"{who}-key.pem"
        signed = cert.sign(ca_key, hashes.SHA256())
        files[f"{who}_cert"].write_bytes(signed.public_bytes(serialization.Encoding.PEM))
        files[f"{who}_key"].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                          serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
        files[f"{who}_key"].chmod(0o600)
    return files


TLS_PORT = 2376


def start_dockerd(h: NetHost, name: str, directory: Path, timeout: float = 60.0) -> Engine:
    """Start dockerd in the host's network namespace (this mount namespace: containerd's
    mounts are seen) and wait until it answers: on a socket in `directory`, and on the
    host's address, port TLS_PORT, with TLS whose files (`tls_files`) are in directory/tls."""
    directory.mkdir(parents=True)
    (directory / "tls").mkdir()
    tls = tls_files(directory / "tls", h.address)
    bridge = name[-15:]
    # containerd's namespaces are words joined by single separators: a session's random part
    # (mkdtemp's) may start with '_' after the prefix's '-'
    namespace = re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")
    _run("ip", "-n", h.netns, "link", "add", bridge, "type", "bridge")
    _run("ip", "-n", h.netns, "addr", "add", f"172.31.{secrets.randbelow(250) + 1}.1/24", "dev", bridge)
    _run("ip", "-n", h.netns, "link", "set", bridge, "up")
    with open(directory / "dockerd.log", "wb") as log:
        process = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{h.netns}", "dockerd", "--data-root", str(directory / "data"),
             "--exec-root", str(directory / "x"), "--pidfile", str(directory / "dockerd.pid"),
             "-H", f"unix://{directory / 'docker.sock'}", "-H", f"tcp://{h.address}:{TLS_PORT}",
             "--tlsverify", "--tlscacert", str(tls["ca"]), "--tlscert", str(tls["server_cert"]),
             "--tlskey", str(tls["server_key"]),
             "--bridge", bridge, "--containerd-namespace", namespace,
             "--containerd-plugins-namespace", f"{namespace}-plugins"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    engine = Engine(h, name, directory, process)
    deadline = time.monotonic() + timeout
    while subprocess.run(["docker", "-H", engine.url, "info"], capture_output=True).returncode:
        if process.poll() is not None or time.monotonic() > deadline:
            said = (directory / "dockerd.log").read_text(errors="replace")[-2000:]
            stop_dockerd(engine)
            raise RuntimeError(f"dockerd {name} did not answer within {timeout:g} s:\n{said}")
        time.sleep(0.1)
    return engine


def stop_dockerd(engine: Engine, timeout: float = 30.0) -> None:
    """Stop it (SIGTERM; SIGKILL after `timeout`) and remove what it kept."""
    engine.process.terminate()
    try:
        engine.process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(engine.process.pid, signal.SIGKILL)
        engine.process.wait(timeout)
    subprocess.run(["ip", "-n", engine.host.netns, "link", "del", engine.bridge], capture_output=True)
    shutil.rmtree(engine.dir, ignore_errors=True)


def add(h: NetHost) -> None:
    """Build one host of a set whose bridge exists: its namespace, veth, sshd config and,
    with own homes, its user. Its sshd is not started yet."""
    hs = h.set
    h.dir.mkdir()
    _run("ip", "netns", "add", h.netns)
    _run("ip", "link", "add", f"{h.netns}v", "type", "veth", "peer", "name", "eth0", "netns", h.netns)
    _run("ip", "link", "set", f"{h.netns}v", "master", hs.bridge, "up")
    _run("ip", "-n", h.netns, "addr", "add", f"{h.address}/24", "dev", "eth0")
    _run("ip", "-n", h.netns, "link", "set", "eth0", "up")
    _run("ip", "-n", h.netns, "link", "set", "lo", "up")
    _run("ip", "-n", h.netns, "route", "add", "default", "via", f"{hs.subnet}.1")
    key = h.dir / "ssh_host_ed25519_key"
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
    (h.dir / "known_hosts").write_text(h.known_hosts_line + "\n")
    # SetEnv HOME: the set's logins share a home of their own, not root's real one, so
    # that what netspec installs and leaves there stays with the set.
    home = "" if hs.own_homes else f"SetEnv HOME={hs.home}\n"
    (h.dir / "sshd_config").write_text(
        f"ListenAddress {h.address}:22\nHostKey {key}\nPidFile {h.dir / 'sshd.pid'}\n"
        f"AuthorizedKeysFile .ssh/authorized_keys {hs.state / 'authorized_keys'}\n"
        "PermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nAllowTcpForwarding yes\nSubsystem sftp internal-sftp\n"
        f"MaxStartups 100\nLogLevel ERROR\n{home}")
    if hs.own_homes:
        # "*": no password, yet not locked ("!"), which sshd would refuse without PAM.
        _run("useradd", "--create-home", "--shell", "/bin/bash", "--password", "*", h.user)
        # In the user's own home: sshd reads the keys as the user, who may not be able
        # to reach the state directory.
        ssh_dir = h.home / ".ssh"
        ssh_dir.mkdir(mode=0o700)
        shutil.copy(hs.state / "authorized_keys", ssh_dir / "authorized_keys")
        _run("chown", "-R", f"{h.user}:{h.user}", str(ssh_dir))


def start_and_check(h: NetHost, timeout: float = 20.0) -> None:
    """Start the host's sshd and wait until it serves a real SSH session."""
    h.start_sshd()
    deadline = time.monotonic() + timeout
    while not h.sshd_answers():
        if time.monotonic() > deadline:
            log = (h.dir / "sshd.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"{h.alias} ({h.address}): sshd serves no SSH session after "
                               f"{timeout:g} s; sshd.log:\n{log}")
        time.sleep(0.1)


def remove(h: NetHost) -> None:
    """Remove one host: its processes, veth, namespace and, with own homes, its user."""
    h.kill_everything()
    # The veth goes with the namespace only once the kernel gets round to it.
    subprocess.run(["ip", "link", "del", f"{h.netns}v"], capture_output=True)
    subprocess.run(["ip", "netns", "del", h.netns], capture_output=True)
    if h.set.own_homes:
        subprocess.run(["pkill", "-KILL", "-u", h.user], capture_output=True)
        subprocess.run(["userdel", "--remove", h.user], capture_output=True)
    shutil.rmtree(h.dir, ignore_errors=True)


def reap() -> None:
    """Remove every set whose owner died (a test suite killed before its teardown)."""
    if REGISTRY.is_dir():
        with _registry_lock():
            _reap_locked()


def _reap_locked(also: str | None = None) -> None:
    for entry in _registered():
        if entry["prefix"] == also or not owner_alive(entry.get("owner")):
            _down_locked(entry["prefix"], Path(entry["state"]))


def down(prefix: str, state: Path | None = None) -> None:
    """Remove every host of the set, their users if they had them, the bridge and the
    state directory; quiet about what is already gone."""
    with _registry_lock():
        _down_locked(prefix, state or default_state(prefix))


def _down_locked(prefix: str, state: Path) -> None:
    own = {e["prefix"]: e.get("own_homes", False) for e in _registered()}.get(prefix, False)
    hs = HostSet(prefix, "0.0.0", state, own)
    for netns in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines():
        name = netns.split(" ")[0]
        if name.startswith(f"{prefix}h") and name[len(prefix) + 1:].isdigit():
            remove(hs.host(int(name[len(prefix) + 1:])))
    subprocess.run(["ip", "link", "del", hs.bridge], capture_output=True)
    remove_forwarding(prefix)
    shutil.rmtree(state, ignore_errors=True)
    (REGISTRY / f"{prefix}.json").unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Build (up) or remove (down) real test hosts: network namespaces on a bridge, "
                    "each with its own address and sshd. Needs root.",
        epilog="After `up`, point NETSPEC_SSH_CONFIG at the ssh_config it prints and name the hosts "
               "netspec-h1.. in an experiment file.")
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("count", type=int, nargs="?", default=3, help="how many hosts (up; default 3)")
    parser.add_argument("--prefix", default="nsh",
                        help="what every namespace, veth, bridge and user name starts with (default nsh)")
    parser.add_argument("--state", type=Path, help="the state directory (default /tmp/netspec-hosts-PREFIX)")
    parser.add_argument("--own-homes", action="store_true",
                        help="log into each host as a user of its own (no shared home)")
    args = parser.parse_args()
    reason = why_unavailable()
    if reason:
        print(f"nethosts: {reason}", file=sys.stderr)
        return 2
    if args.action == "down":
        down(args.prefix, args.state)
        return 0
    hosts = up(args.count, args.prefix, args.state, args.own_homes)
    for h in hosts:
        print(f"{h.alias}: {h.address} (namespace {h.netns}, user {h.user})")
    print(f"export NETSPEC_SSH_CONFIG={hosts[0].set.ssh_config}   # then use hosts: "
          f"{{h1: {{ssh: {hosts[0].alias}}}}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
