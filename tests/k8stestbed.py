"""A real Kubernetes of one or two nodes on this machine, for the `kubernetes:` hosts' tests
and for trying them by hand, without a registry: Kubernetes built from the k8s.io/kubernetes
Go modules, Debian's etcd, a containerd of its own for each node (not dockerd's) and the CNI
plugins, and a pause image made here.

    python tests/k8stestbed.py up [--prefix P] [--nodes 2]  # build once per version, start;
                                                             # prints export KUBECONFIG=...
    python tests/k8stestbed.py down [--prefix P]  # stop it, remove all it made
    python tests/k8stestbed.py build              # only the binaries, into the cache

(`make k8s-testbed` and `make k8s-testbed-down`.) The binaries are built once per version
into $NETSPEC_CACHE/k8s/VERSION (about 7 minutes on two free cores, 3 GB of Go build cache);
everything a cluster runs from lives in its state directory, /tmp/netspec-k8s-PREFIX, which
holds each process's PID, so that `down` ends exactly what `up` started. Every name and
address carries the prefix: each node's veth and CNI bridge (`PREFIX` in their names), the
firewall rules (commented with it), the subnets (from the prefix's hash), the containerd
sockets and the nodes' names (PREFIX-node, PREFIX-node2). A second node is a kubelet and a
containerd of its own in this machine's network namespace, its pods on a bridge and a subnet
of their own: this machine routes between the two bridges, and each pod's default route
goes through its bridge. netspec's image goes into the cluster's containerd as `docker
save | ctr images import` puts it (`import-image`): the pods run it with imagePullPolicy Never.

The facts behind each setting (../shared/references/kubernetes-here.md): kubelet v1.34 is the
last tried that starts on cgroup v1 with containerd 1.6; containerd's CRI needs
restrict_oom_score_adj here (root without CAP_SYS_RESOURCE); dockerd's FORWARD policy DROP
cuts the CNI bridge unless DOCKER-USER lets it by.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

VERSION = "v1.34.4"
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet")
STAGING = re.compile(r"^(\s*)(k8s\.io/[\w.-]+) => \./staging/src/k8s\.io/[\w.-]+\s*$", re.M)


def cache_dir() -> Path:
    return Path(os.environ.get("NETSPEC_CACHE", Path("~/.cache/netspec").expanduser())) / "k8s" / VERSION


def _run(argv: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, timeout=timeout, **kw)


def build() -> Path:
    """The four binaries of VERSION in the cache, built unless there. k8s.io/kubernetes's own
    go.mod replaces its k8s.io modules with ./staging folders that its module zip lacks, so
    a wrapper module takes its go.mod with each of those replaced by the release's module."""
    out = cache_dir() / "bin"
    if all((out / name).exists() for name in COMPONENTS):
        return out
    if shutil.which("go") is None:
        raise SystemExit("k8stestbed: Go is not installed: the cluster's binaries are built from "
                         "the k8s.io/kubernetes modules")
    work = cache_dir() / "module"
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
    got = json.loads(_run(["go", "mod", "download", "-json", f"k8s.io/kubernetes@{VERSION}"],
                          timeout=600, cwd=work, env=env, capture_output=True, text=True).stdout)
    staging = VERSION.replace("v1.", "v0.", 1)
    gomod = Path(got["GoMod"]).read_text()
    gomod = gomod.replace("module k8s.io/kubernetes", "module netspec.local/k8stestbed", 1)
    gomod = STAGING.sub(lambda m: f"{m[1]}{m[2]} => {m[2]} {staging}", gomod)
    gomod += f"\nrequire k8s.io/kubernetes {VERSION}\n"
    (work / "go.mod").write_text(gomod)
    (work / "tools.go").write_text("package k8stestbed\n")
    _run(["go", "mod", "download"], timeout=1200, cwd=work, env=env)
    major, minor = VERSION.lstrip("v").split(".")[:2]
    flags = " ".join(f"-X k8s.io/component-base/version.{key}={value}" for key, value in
                     (("gitVersion", VERSION), ("gitMajor", major), ("gitMinor", minor)))
    tmp = cache_dir() / "bin.partial"
    tmp.mkdir(parents=True, exist_ok=True)
    _run(["go", "build", "-trimpath", f"-ldflags=-s -w {flags}", "-o", str(tmp) + "/",
          *(f"k8s.io/kubernetes/cmd/{name}" for name in COMPONENTS)], timeout=3600, cwd=work, env=env)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


PAUSE_C = b"#include <unistd.h>\nint main(void) { for (;;) pause(); }\n"
PAUSE_IMAGE = "localhost/netspec-pause:1"
READY_S = 120.0
SHARED = (Path("/var/lib/kubelet"), Path("/var/lib/cni"), Path("/var/log/containers"))
CGROUP_PARENT = "k8s.io"  # containerd's CRI puts its containers' cgroups under it (cgroupsPerQOS off)


class Node:
    """One node of a cluster: its kubelet and containerd, its address on a veth of its own,
    its CNI bridge and pod subnet, and its files (`state`: the cluster's directory for the
    first node, a directory of its own in it for the second)."""

    def __init__(self, tb: Testbed, index: int, a: int, b: int, base: int):
        first = index == 0
        self.index, self.tb = index, tb
        self.name = f"{tb.prefix}-node" + ("" if first else str(index + 1))
        self.ip = f"10.{a}.{b}.{index + 1}"
        self.pod_subnet = f"10.{a}.{b + 1}.0/24" if first else f"10.{a}.{b + 3}.0/24"
        self.bridge = f"{tb.prefix}-br{'' if first else index + 1}"
        self.veth = f"{tb.prefix}-n{'d' if first else index + 1}"
        self.network = tb.prefix if first else f"{tb.prefix}-n{index + 1}"  # the CNI network's name
        self.state = tb.dir if first else tb.dir / f"node{index + 1}"
        self.ports = {"kubelet": base + 3 + 4 * index, "kubelet_healthz": base + 4 + 4 * index}
        self.containerd_sock = self.state / "containerd" / "containerd.sock"
        self.pid_names = (("containerd", "kubelet") if first else
                          (f"containerd-{index + 1}", f"kubelet-{index + 1}"))

    def path(self, *parts: str) -> Path:
        return self.state.joinpath(*parts)


class Testbed:
    """One cluster's names, addresses, ports and files, all from its prefix: one node, or two
    (`nodes`), the second a kubelet and a containerd of its own beside the first's."""

    def __init__(self, prefix: str, nodes: int = 1):
        if not re.fullmatch(r"[a-z][a-z0-9]{0,7}", prefix):
            raise SystemExit(f"k8stestbed: prefix {prefix!r}: 1-8 lower-case letters and digits, "
                             "a letter first (it names interfaces, 15 characters at most)")
        if nodes not in (1, 2):
            raise SystemExit(f"k8stestbed: {nodes} nodes: one or two")
        self.prefix = prefix
        h = int.from_bytes(hashlib.sha256(prefix.encode()).digest()[:4], "big")
        # 10.a.b.0/22: the nodes' addresses, the first node's pods, the services, the second's pods
        a, b = 150 + h % 50, (h >> 8) % 64 * 4
        self.service_subnet = f"10.{a}.{b + 2}.0/24"
        self.service_ip = f"10.{a}.{b + 2}.1"
        base = 21000 + (h >> 16) % 400 * 12
        self.ports = {"etcd": base, "etcd_peer": base + 1, "apiserver": base + 2,
                      "controller_manager": base + 5, "scheduler": base + 6}
        self.dir = Path(f"/tmp/netspec-k8s-{prefix}")
        self.kubeconfig = self.dir / "kubeconfig"
        # A testbed's `down` finds its second node by its directory, whatever it was asked.
        count = 2 if nodes == 2 or (self.dir / "node2").is_dir() else 1
        self.nodes = [Node(self, i, a, b, base) for i in range(count)]
        first = self.nodes[0]
        self.node, self.node_ip, self.pod_subnet = first.name, first.ip, first.pod_subnet
        self.bridge, self.veth, self.containerd_sock = first.bridge, first.veth, first.containerd_sock

    def path(self, *parts: str) -> Path:
        return self.dir.joinpath(*parts)


def _sh(argv: list[str], timeout: float = 60, check: bool = True, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, timeout=timeout, capture_output=True, text=True, **kw)
    if check and done.returncode:
        raise SystemExit(f"k8stestbed: {' '.join(argv)}: exit {done.returncode}: "
                         f"{done.stderr.strip()[-2000:]}")
    return done


def _certs(tb: Testbed) -> None:
    """A CA; the apiserver's certificate (its addresses and the service's names); the admin's
    client certificate (system:masters); the service accounts' key pair."""
    pki = tb.path("pki")
    pki.mkdir(parents=True, exist_ok=True)

    def key(name: str) -> None:
        _sh(["openssl", "genrsa", "-out", str(pki / f"{name}.key"), "2048"])

    key("ca")
    _sh(["openssl", "req", "-x509", "-new", "-key", str(pki / "ca.key"), "-subj", f"/CN={tb.prefix}-ca",
         "-days", "30", "-out", str(pki / "ca.crt")])
    sans = (f"subjectAltName=IP:127.0.0.1,IP:{tb.node_ip},IP:{tb.service_ip},DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc")
    for name, subject, ext in (("apiserver", "/CN=kube-apiserver", sans),
                               ("admin", "/CN=admin/O=system:masters", "")):
        key(name)
        _sh(["openssl", "req", "-new", "-key", str(pki / f"{name}.key"), "-subj", subject,
             "-out", str(pki / f"{name}.csr")])
        extfile = pki / f"{name}.ext"
        extfile.write_text(ext + "\n" if ext else "basicConstraints=CA:FALSE\n")
        _sh(["openssl", "x509", "-req", "-in", str(pki / f"{name}.csr"), "-CA", str(pki / "ca.crt"),
             "-CAkey", str(pki / "ca.key"), "-CAcreateserial", "-days", "30", "-extfile", str(extfile),
             "-out", str(pki / f"{name}.crt")])
    key("sa")
    _sh(["openssl", "rsa", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub")])


def _kubeconfig(tb: Testbed) -> None:
    import base64

    def b64(name: str) -> str:
        return base64.b64encode(tb.path("pki", name).read_bytes()).decode()

    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": tb.prefix,
        "clusters": [{"name": tb.prefix, "cluster": {
            "server": f"https://127.0.0.1:{tb.ports['apiserver']}",
            "certificate-authority-data": b64("ca.crt")}}],
        "users": [{"name": f"{tb.prefix}-admin", "user": {
            "client-certificate-data": b64("admin.crt"), "client-key-data": b64("admin.key")}}],
        "contexts": [{"name": tb.prefix, "context": {"cluster": tb.prefix, "user": f"{tb.prefix}-admin"}}],
    }
    tb.kubeconfig.write_text(json.dumps(config, indent=1))  # JSON is YAML
    tb.kubeconfig.chmod(0o600)


def _containerd_config(node: Node) -> Path:
    c = node.path("containerd")
    c.mkdir(parents=True, exist_ok=True)
    config = c / "config.toml"
    config.write_text(f"""version = 2
root = "{c}/root"
state = "{c}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri.v1alpha2"]
[grpc]
  address = "{node.containerd_sock}"
[ttrpc]
  address = "{c}/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{node.path('cni')}"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
""")
    return config


def _cni(node: Node) -> None:
    node.path("cni").mkdir(parents=True, exist_ok=True)
    conf = {"cniVersion": "1.0.0", "name": node.network, "plugins": [
        {"type": "bridge", "bridge": node.bridge, "isGateway": True, "ipMasq": False,
         # a default route through the bridge: a pod reaches the other node's pods through
         # this machine, which routes between the two bridges
         "ipam": {"type": "host-local", "ranges": [[{"subnet": node.pod_subnet}]],
                  "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(node.path("cni-ipam"))}}]}
    (node.path("cni") / f"10-{node.network}.conflist").write_text(json.dumps(conf, indent=1))


def _kubelet_config(node: Node) -> Path:
    config = node.path("kubelet.yaml")
    config.write_text(json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": node.ip, "port": node.ports["kubelet"], "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": node.ports["kubelet_healthz"],
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs", "cgroupsPerQOS": False, "enforceNodeAllocatable": [],
        "failSwapOn": False, "makeIPTablesUtilChains": False,
        "containerRuntimeEndpoint": f"unix://{node.containerd_sock}",
        "podLogsDir": str(node.path("pod-logs")),
        "evictionHard": {"memory.available": "1%", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "maxPods": 250, "registerNode": True, "serializeImagePulls": False,
        # Its in-place resize dereferences the pod cgroup's config, which cgroupsPerQOS false
        # leaves nil: the kubelet panicked on a pod's second sync (v1.34.4).
        "featureGates": {"InPlacePodVerticalScaling": False},
    }, indent=1))
    return config


def _pause_image(tb: Testbed) -> Path:
    """The sandbox's image: a static pause() loop as a one-layer image in docker save's form."""
    import io
    import tarfile

    work = tb.path("pause")
    work.mkdir(parents=True, exist_ok=True)
    (work / "pause.c").write_bytes(PAUSE_C)
    _sh(["gcc", "-static", "-Os", "-o", str(work / "pause"), str(work / "pause.c")])
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        tar.add(work / "pause", arcname="pause")
    layer_bytes = layer.getvalue()
    diff = hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Entrypoint": ["/pause"]},
                         "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff}"]}}).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [PAUSE_IMAGE],
                            "Layers": [f"{diff}/layer.tar"]}]).encode()
    image = work / "pause.tar"
    with tarfile.open(image, mode="w") as tar:
        for name, body in ((f"{diff}/layer.tar", layer_bytes), (config_name, config),
                           ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return image


def _start(tb: Testbed, name: str, argv: list[str]) -> int:
    """A process of the cluster's, detached (a session of its own, and init's child, not
    this process's: the cluster outlives `up`, and a test session's process leaves no child
    of its own behind), its output in logs/NAME.log and its PID in pids/NAME. `down` ends it
    by that PID, checked against its command line (`_pid`)."""
    tb.path("logs").mkdir(exist_ok=True)
    tb.path("pids").mkdir(exist_ok=True)
    log = tb.path("logs", f"{name}.log")
    # sh starts it in the background, says its PID and exits: the process is reparented.
    done = _sh(["setsid", "sh", "-c", 'log=$1; shift; "$@" >>"$log" 2>&1 </dev/null & echo $!', "sh",
                str(log), *argv])
    pid = int(done.stdout.split()[-1])
    tb.path("pids", name).write_text(f"{pid} {argv[0]}")
    return pid


def _wait(what: str, tb: Testbed, ready, deadline_s: float = READY_S) -> None:
    deadline = time.monotonic() + deadline_s
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"k8stestbed: {what} not ready within {deadline_s:g} s; the logs are in "
                             f"{tb.path('logs')}")
        for pid_file in tb.path("pids").iterdir():
            if not _pid(tb, pid_file.name):
                log = tb.path("logs", f"{pid_file.name}.log").read_text(errors="replace")[-3000:]
                raise SystemExit(f"k8stestbed: {pid_file.name} ended while waiting for {what}:\n{log}")
        time.sleep(0.2)


def _get(tb: Testbed, path: str) -> bytes | None:
    """GET `path` of the apiserver as the admin, or None while it does not answer."""
    import ssl
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(tb.path("pki", "ca.crt")))
    ctx.load_cert_chain(str(tb.path("pki", "admin.crt")), str(tb.path("pki", "admin.key")))
    try:
        url = f"https://127.0.0.1:{tb.ports['apiserver']}{path}"
        with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
            return r.read()
    except OSError:
        return None


def _node_ready(tb: Testbed, name: str) -> bool:
    node = json.loads(_get(tb, f"/api/v1/nodes/{name}") or b"{}")
    conditions = node.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


@contextlib.contextmanager
def _kubelet_start_lock() -> Iterator[None]:
    """This machine's lock on a kubelet's start (a file in the binaries' cache, which every
    testbed of the machine shares), held until it is released or its holder ends."""
    import fcntl

    path = cache_dir() / "kubelet-start.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _firewall(tb: Testbed, add: bool) -> None:
    """dockerd's FORWARD policy is DROP: the CNI bridge's traffic let by in DOCKER-USER."""
    if _sh(["iptables", "-S", "DOCKER-USER"], check=False).returncode != 0:
        return
    for way, node in ((w, n) for n in tb.nodes for w in ("-i", "-o")):
        rule = ["DOCKER-USER", way, node.bridge, "-m", "comment", "--comment", f"netspec-k8s-{tb.prefix}",
                "-j", "ACCEPT"]
        if add:
            _sh(["iptables", "-I", *rule])
        else:
            while _sh(["iptables", "-D", *rule], check=False).returncode == 0:
                pass


def up(tb: Testbed) -> None:
    if tb.path("pids").exists() and any(tb.path("pids").iterdir()):
        raise SystemExit(f"k8stestbed: {tb.dir} holds a cluster already: `down --prefix {tb.prefix}` first")
    if shutil.which("containerd") is None or not Path("/usr/lib/cni/bridge").exists():
        raise SystemExit("k8stestbed: containerd and the CNI plugins are needed "
                         "(apt-get install containerd containernetworking-plugins)")
    if shutil.which("etcd") is None:
        raise SystemExit("k8stestbed: etcd is needed (apt-get install etcd-server)")
    binaries = build()
    tb.dir.mkdir(parents=True, exist_ok=True)
    tb.dir.chmod(0o700)
    # What the kubelet and containerd make outside the state directory whatever they are told
    # (paths built into them): removed by the last testbed down, if none was there before.
    made = [str(p) for p in SHARED if not p.exists()]
    made += [f"/sys/fs/cgroup/{h.name}/{CGROUP_PARENT}" for h in Path("/sys/fs/cgroup").iterdir()
             if h.is_dir() and not (h / CGROUP_PARENT).exists()]
    tb.path("made.json").write_text(json.dumps(sorted(set(made))))
    _certs(tb)
    _kubeconfig(tb)
    for node in tb.nodes:
        node.state.mkdir(parents=True, exist_ok=True)
        _cni(node)
        # The node's address on a veth of its own (this kernel has no dummy interfaces).
        _sh(["ip", "link", "add", node.veth, "type", "veth", "peer", "name", f"{node.veth}p"])
        _sh(["ip", "addr", "add", f"{node.ip}/32", "dev", node.veth])
        _sh(["ip", "link", "set", f"{node.veth}p", "up"])
        _sh(["ip", "link", "set", node.veth, "up"])
    _firewall(tb, True)
    pki, p = tb.path("pki"), tb.ports
    for node in tb.nodes:
        _start(tb, node.pid_names[0], ["containerd", "--config", str(_containerd_config(node))])
    _start(tb, "etcd", ["etcd", "--name", tb.prefix, "--data-dir", str(tb.path("etcd")),
                        "--listen-client-urls", f"http://127.0.0.1:{p['etcd']}",
                        "--advertise-client-urls", f"http://127.0.0.1:{p['etcd']}",
                        "--listen-peer-urls", f"http://127.0.0.1:{p['etcd_peer']}",
                        "--initial-advertise-peer-urls", f"http://127.0.0.1:{p['etcd_peer']}",
                        "--initial-cluster", f"{tb.prefix}=http://127.0.0.1:{p['etcd_peer']}"])
    _start(tb, "kube-apiserver", [
        str(binaries / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
        "--bind-address=127.0.0.1", f"--advertise-address={tb.node_ip}", f"--secure-port={p['apiserver']}",
        f"--tls-cert-file={pki}/apiserver.crt", f"--tls-private-key-file={pki}/apiserver.key",
        f"--client-ca-file={pki}/ca.crt", f"--service-account-key-file={pki}/sa.pub",
        f"--service-account-signing-key-file={pki}/sa.key",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-cluster-ip-range={tb.service_subnet}",
        "--authorization-mode=Node,RBAC", "--kubelet-preferred-address-types=InternalIP",
        "--allow-privileged=true", f"--cert-dir={pki}", "--profiling=false"])
    _wait("the apiserver", tb, lambda: _get(tb, "/readyz") == b"ok")
    _start(tb, "kube-controller-manager", [
        str(binaries / "kube-controller-manager"), f"--kubeconfig={tb.kubeconfig}", "--leader-elect=false",
        "--controllers=*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route",
        f"--service-account-private-key-file={pki}/sa.key", f"--root-ca-file={pki}/ca.crt",
        f"--secure-port={p['controller_manager']}", "--bind-address=127.0.0.1", "--profiling=false"])
    _start(tb, "kube-scheduler", [
        str(binaries / "kube-scheduler"), f"--kubeconfig={tb.kubeconfig}", "--leader-elect=false",
        f"--secure-port={p['scheduler']}", "--bind-address=127.0.0.1", "--profiling=false"])
    pause = _pause_image(tb)
    for node in tb.nodes:
        _wait(node.pid_names[0], tb, node.containerd_sock.exists)
        ctr = ["ctr", "--address", str(node.containerd_sock), "-n", "k8s.io"]
        _sh([*ctr, "images", "import", str(pause)], timeout=120)
        # One kubelet of this machine's starts at a time, until its node is ready: each binds
        # /var/lib/kubelet/device-plugins/kubelet.sock, a path built into it, and two binding
        # it at once (this cluster's two nodes, or another suite's testbed) left one of them
        # dead ("bind: address already in use"). The one after takes the path over; nothing
        # here uses device plugins.
        with _kubelet_start_lock():
            _start(tb, node.pid_names[1], [
                str(binaries / "kubelet"), f"--config={_kubelet_config(node)}",
                f"--kubeconfig={tb.kubeconfig}", f"--root-dir={node.path('kubelet')}",
                f"--cert-dir={node.path('kubelet-pki')}", f"--hostname-override={node.name}",
                f"--node-ip={node.ip}"])
            _wait(f"node {node.name}", tb, lambda node=node: _node_ready(tb, node.name))
    (tb.dir / "ready").write_text(json.dumps({"kubeconfig": str(tb.kubeconfig), "nodes": [
        {"name": n.name, "ip": n.ip, "pod_subnet": n.pod_subnet} for n in tb.nodes]}))



def _pids(pattern: str) -> list[int]:
    """The processes whose command line holds `pattern`."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if pattern.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
    return [pid for pid in found if pid != os.getpid()]


def _end(pids: list[int], grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL past the grace."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _pid(tb: Testbed, name: str) -> list[int]:
    """The cluster's process NAME, if it runs: its PID from pids/NAME, whose command line
    still starts with the program started (a PID reused by another is not it)."""
    with contextlib.suppress(OSError, ValueError):
        pid, program = tb.path("pids", name).read_text().split(maxsplit=1)
        if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == program.strip().encode():
            return [int(pid)]
    return []


def _end_pods(tb: Testbed, node: Node) -> list[str]:
    """The node's pods' processes ended (each task of its containerd killed, then its shims),
    then its containerd; the pods' network namespaces, for `down` to remove."""
    netns: list[str] = []
    if node.containerd_sock.exists() and _pid(tb, node.pid_names[0]):
        ctr = ["ctr", "--address", str(node.containerd_sock), "-n", "k8s.io"]
        # The pods' network namespaces, as their sandboxes' specs name them: containerd 1.6
        # mounts them in /var/run/netns whatever it is told, and a sandbox killed here (not
        # torn down by the kubelet) leaves its namespace and its veth behind.
        for container in _sh([*ctr, "containers", "ls", "-q"], check=False).stdout.split():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                info = json.loads(_sh([*ctr, "containers", "info", container], check=False).stdout)
                netns += [n["path"] for n in info["Spec"]["linux"]["namespaces"]
                          if n.get("type") == "network" and n.get("path")]
        tasks = _sh([*ctr, "tasks", "ls", "-q"], check=False).stdout.split()
        for task in tasks:
            _sh([*ctr, "tasks", "kill", "-a", "-s", "SIGKILL", task], check=False)
        for task in tasks:
            _sh([*ctr, "tasks", "delete", "-f", task], check=False)
    _end(_pids(str(node.containerd_sock)), grace_s=2)
    _end(_pid(tb, node.pid_names[0]))
    return netns


def down(tb: Testbed) -> list[str]:
    """Every process, mount, interface, firewall rule and file of the cluster removed; what
    could not be, said. Safe to run again, and on a cluster half up."""
    said: list[str] = []
    netns: list[str] = []
    pods = json.loads(_get(tb, "/api/v1/pods") or b"{}") if tb.path("pki").exists() else {}
    uids = [item["metadata"]["uid"] for item in pods.get("items", [])]
    for node in tb.nodes:
        _end(_pid(tb, node.pid_names[1]))
    for node in tb.nodes:
        netns += _end_pods(tb, node)
    for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
        _end(_pid(tb, name))
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        for uid in uids:
            for cgroup in sorted(hierarchy.glob(f"**/pod{uid}*"), key=lambda c: -len(c.parts)):
                for inner in sorted(cgroup.glob("**/"), key=lambda c: -len(c.parts)):
                    with contextlib.suppress(OSError):
                        inner.rmdir()
    for path in dict.fromkeys(netns):
        _sh(["umount", path], check=False)
        with contextlib.suppress(FileNotFoundError):
            Path(path).unlink()
        if Path(path).exists():
            said.append(f"network namespace {path}: not removed")
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(str(tb.dir) + "/")), key=len, reverse=True):
        if _sh(["umount", "-l", mount], check=False).returncode != 0:
            said.append(f"mount {mount}: not unmounted")
    for link in (link for node in tb.nodes for link in (node.bridge, node.veth)):
        if Path(f"/sys/class/net/{link}").exists():
            _sh(["ip", "link", "del", link], check=False)
    _firewall(tb, False)
    for cached in Path("/var/lib/cni/results").glob(f"{tb.prefix}-*"):
        cached.unlink()
    with contextlib.suppress(FileNotFoundError):
        for log in Path("/var/log/containers").iterdir():
            if log.is_symlink() and os.readlink(log).startswith(str(tb.dir) + "/"):
                log.unlink()
    made = json.loads(tb.path("made.json").read_text()) if tb.path("made.json").exists() else []
    if not any(other != tb.dir and (other / "pids").exists() for other in Path("/tmp").glob("netspec-k8s-*")):
        for path in made:
            if path.startswith("/sys/fs/cgroup/"):
                with contextlib.suppress(OSError):  # empty once every container of it is gone
                    Path(path).rmdir()
            else:
                shutil.rmtree(path, ignore_errors=True)
    if tb.dir.exists():
        shutil.rmtree(tb.dir, ignore_errors=True)
        if tb.dir.exists():
            said.append(f"{tb.dir}: not all removed")
    return said


def import_image(tb: Testbed, image: str) -> None:
    """A Docker image of this machine's engine into each node's containerd (`docker save`,
    then `ctr images import` of it): pods run it with imagePullPolicy Never."""
    saved = tb.path("image.tar")
    _sh(["docker", "save", "-o", str(saved), image], timeout=600)
    try:
        for node in tb.nodes:
            _sh(["ctr", "--address", str(node.containerd_sock), "-n", "k8s.io", "images", "import",
                 str(saved)], timeout=600)
    finally:
        saved.unlink(missing_ok=True)


def _netspec_image() -> str:
    """netspec's image of this checkout in this machine's Docker engine, built unless there."""
    from netspec.controller.hosts.engines import engine_client
    from netspec.controller.hosts.images import build as build_image

    client = engine_client(None)
    try:
        return build_image(client, lambda said: print(f"k8stestbed: {said}", file=sys.stderr))
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["up", "down", "build", "import-image"])
    parser.add_argument("--prefix", default="nsk8s", help="names every part of the cluster (default nsk8s)")
    parser.add_argument("--image", default="", help="import-image: the Docker image to import")
    parser.add_argument("--nodes", type=int, default=1, choices=(1, 2),
                        help="up: one node, or two (a kubelet and a containerd of its own beside "
                             "the first's)")
    parser.add_argument("--netspec-image", action="store_true",
                        help="up: also build netspec's image (ns_control image build) and import it")
    args = parser.parse_args()
    if args.action == "build":
        print(build())
        return
    tb = Testbed(args.prefix, args.nodes)
    if args.action == "up":
        try:
            up(tb)
        except BaseException:
            down(tb)
            raise
        if args.netspec_image:
            import_image(tb, _netspec_image())
        print(f"export KUBECONFIG={tb.kubeconfig}")
    elif args.action == "down":
        for line in down(tb):
            print(f"k8stestbed: {line}", file=sys.stderr)
    else:
        import_image(tb, args.image)


if __name__ == "__main__":
    main()
