"""A host in a Kubernetes pod (`kubernetes:` in the experiment file), through the official
`kubernetes` Python client (the controller's dependency alone: the daemon never imports it).

One bare pod per host (restartPolicy Never), named `<prefix>-<run>-<host>` and labelled with
the run and the host, in a namespace made for the run (`<prefix>-<run>`, removed with its
last pod) or the one given (controller/hosts/cluster.py holds the cluster: its client, the
run's namespace, what runs left there). The cluster is the one kubectl would use (KUBECONFIG, else
~/.kube/config, and its current context) unless `kubeconfig:` or `context:` name another.

The pod runs netspec's image (or the one given, with netspec installed) as it is in the
node's runtime: imagePullPolicy Never, since no registry is needed or assumed; the testbed
(tests/k8stestbed.py import-image) puts netspec's image there. Its three containers:
- `key`, an init container, copies the daemon's key for the run from the pod's Secret into
  a memory-backed volume, and netspecd removes the file as it reads it (`--run-key`): the
  programs never find it, and the Secret is mounted in no container of theirs;
- `netspecd`, the daemon, its address the pod's IP (the downward API: daemon/facts.py tells
  its programs that address), with the capabilities, CPU and memory asked;
- `keeper`, which only sleeps: the run's directory is a volume the two share, so that once
  netspecd has died the keeper still holds its streams for a salvage or `collect` to copy
  out (a tar through the exec API). A pod deleted takes them with it: the loss is said.

The controller reaches netspecd at the pod's IP, routed from the controller's machine (the
testbed's pods, or a cluster whose pod network the controller's machine reaches). Each call
to the API runs in the fleet's pool of engine calls (`Engines`), as a Docker host's do.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import io
import os
import time
from pathlib import Path
from typing import IO, Any

from netspec.camp.cgroup import CONTAINER_ENV
from netspec.protocol.auth import new_run_key
from netspec.protocol.errors import ConnectionLost, NetspecError
from netspec.protocol.hostfacts import HostFacts
from netspec.protocol.names import safe_name
from netspec.protocol.runrecord import Limits, Placement

from ..experiment.model import Host as HostSpec
from .cluster import (
    API_TIMEOUT_S,
    Cluster,
    Clusters,
    api_errors,
    api_exception,
    api_said,
    delete_named,
    label,
)
from .engines import Engines, memory_bytes
from .fleet import Host
from .images import NETSPECD, default_image
from .leftovers import CONTROLLER_LABEL, HOST_LABEL, KEPT_LABEL, RUN_LABEL, controller_id
from .runfiles import ArchiveRunFiles, programs_archive

DAEMON_ADDRESS_ENV = "NETSPEC_DAEMON_ADDRESS"  # daemon/facts.py: the address its components are told
PORT = 7420  # netspecd's in the pod: each pod has its own network namespace
WORK = "/var/lib/netspec/work"
PROGRAMS = "/var/lib/netspec/programs"
KEY_DIR = "/etc/netspec"
SECRET_DIR = "/etc/netspec-secret"
START_S = 90.0  # a pod scheduled, its sandbox and three containers started, netspecd listening
POLL_S = 0.1
KEEPER = "keeper"
ARG_CHUNK = 96 * 1024  # base64 characters a command line: under the kernel's 128 KiB an argument


class PodHost(Host):
    """A host with `kubernetes:` in the experiment file."""

    start_deadline_s = START_S + API_TIMEOUT_S

    def __init__(self, spec: HostSpec, run_id: str, engines: Engines, clusters: Clusters, keep: bool = False):
        super().__init__(spec)
        assert spec.kubernetes is not None
        self.k8s = spec.kubernetes
        self.run_id, self.keep = run_id, keep
        self.run_key = new_run_key()  # this host's for this run alone, as a container's
        self.engines, self.clusters = engines, clusters
        self.cluster: Cluster | None = None
        self.pod: Any = None
        self.counted = False  # counted in the run's namespace (`Cluster.namespace`)
        self.address = ""
        self.making: concurrent.futures.Future[None] | None = None  # `_make` in the fleet's pool

    @property
    def namespace(self) -> str:
        return self.k8s.namespace or label(f"{self.k8s.prefix}-{self.run_id}")

    @property
    def pod_name(self) -> str:
        return label(f"{self.k8s.prefix}-{self.run_id}-{safe_name(self.name, 'host')}")

    @property
    def secret_name(self) -> str:
        return f"{self.pod_name}-key"

    @property
    def _netspecd(self) -> str:
        """netspecd's path: netspec's image's, else on the PATH of the image given."""
        return NETSPECD if self.k8s.image is None else "netspecd"

    @property
    def labels(self) -> dict[str, str]:
        return {RUN_LABEL: label(self.run_id), HOST_LABEL: label(self.name),
                CONTROLLER_LABEL: label(controller_id(os.getpid())),
                **({KEPT_LABEL: "1"} if self.keep else {})}

    @property
    def annotations(self) -> dict[str, str]:
        """The run and the controller as they are: a label's value is folded to a name's
        letters (`_label`), which a run's directory and /proc cannot be found by."""
        return {RUN_LABEL: self.run_id, CONTROLLER_LABEL: controller_id(os.getpid())}

    async def start(self, log_dir: Path) -> tuple[str, int]:
        try:
            self.making = self.engines.submit(self._make)
            await asyncio.wrap_future(self.making)
            await self._running(log_dir)
        except api_errors() as exc:
            body = (getattr(exc, "body", None) or "")[:500]
            raise ConnectionLost(self.name, detail=f"{self._where}: {api_said(exc)}"
                                 f"{': ' + body if body else ''}") from exc
        except NetspecError as exc:  # its kubeconfig (Cluster)
            raise ConnectionLost(self.name, detail=str(exc)) from exc
        return self.address, PORT

    @property
    def _where(self) -> str:
        return self.cluster.where if self.cluster else "cluster (none)"

    def _make(self) -> None:
        """The namespace (the run's, once), the key's Secret and the pod."""
        from kubernetes.client import V1ObjectMeta, V1Secret

        self.cluster = self.clusters.get(self.k8s)
        if self.k8s.namespace is None:
            self.cluster.namespace(self.namespace, self.run_id)
            self.counted = True
        core = self.cluster.core
        core.create_namespaced_secret(self.namespace, V1Secret(
            metadata=V1ObjectMeta(name=self.secret_name, labels=self.labels),
            string_data={"key": self.run_key.hex() + "\n"}), _request_timeout=API_TIMEOUT_S)
        self.pod = core.create_namespaced_pod(self.namespace, self._pod(), _request_timeout=API_TIMEOUT_S)

    def _pod(self) -> Any:
        from kubernetes import client as c

        k = self.k8s
        image = k.image or default_image(k.packages)
        quantities = {**({"cpu": str(k.cpus)} if k.cpus else {}),
                      **({"memory": str(memory_bytes(k.memory))} if k.memory else {})}
        mounts = [c.V1VolumeMount(name="work", mount_path=WORK)]
        daemon = c.V1Container(
            name="netspecd", image=image, image_pull_policy="Never",
            command=[self._netspecd, "--listen", f"0.0.0.0:{PORT}", "--run-key", f"{KEY_DIR}/key",
                     "--only-run", self.run_id, "--root", WORK],
            env=[c.V1EnvVar(name=DAEMON_ADDRESS_ENV, value_from=c.V1EnvVarSource(
                    field_ref=c.V1ObjectFieldSelector(field_path="status.podIP"))),
                 c.V1EnvVar(name=CONTAINER_ENV, value="pod")],
            security_context=c.V1SecurityContext(capabilities=c.V1Capabilities(add=list(k.cap_add))),
            resources=c.V1ResourceRequirements(requests=quantities or None, limits=quantities or None),
            volume_mounts=[*mounts, c.V1VolumeMount(name="key", mount_path=KEY_DIR),
                           c.V1VolumeMount(name="programs", mount_path=PROGRAMS)],
            readiness_probe=c.V1Probe(tcp_socket=c.V1TCPSocketAction(port=PORT), period_seconds=1))
        return c.V1Pod(
            metadata=c.V1ObjectMeta(name=self.pod_name, labels=self.labels, annotations=self.annotations),
            spec=c.V1PodSpec(
                restart_policy="Never", hostname=label(self.name),
                node_selector=dict(k.node_selector) or None,
                automount_service_account_token=False, termination_grace_period_seconds=5,
                init_containers=[c.V1Container(
                    name="key", image=image, image_pull_policy="Never",
                    command=["cp", f"{SECRET_DIR}/key", f"{KEY_DIR}/key"],
                    volume_mounts=[c.V1VolumeMount(name="secret", mount_path=SECRET_DIR, read_only=True),
                                   c.V1VolumeMount(name="key", mount_path=KEY_DIR)])],
                containers=[daemon, c.V1Container(
                    name=KEEPER, image=image, image_pull_policy="Never", command=["sleep", "infinity"],
                    volume_mounts=mounts,
                    resources=c.V1ResourceRequirements(requests={"cpu": "1m", "memory": "4Mi"}))],
                volumes=[c.V1Volume(name="work", empty_dir=c.V1EmptyDirVolumeSource()),
                         c.V1Volume(name="programs", empty_dir=c.V1EmptyDirVolumeSource()),
                         c.V1Volume(name="key", empty_dir=c.V1EmptyDirVolumeSource(medium="Memory")),
                         c.V1Volume(name="secret", secret=c.V1SecretVolumeSource(
                             secret_name=self.secret_name, default_mode=0o400))]))

    async def _running(self, log_dir: Path) -> None:
        """Until netspecd listens (its readiness probe) or the pod fails, within START_S: the
        pod's IP. The Secret stays until the pod goes: the kubelet keeps its volume in sync,
        and a Secret deleted under it had it retry, and log, for the pod's life."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_S
        while True:
            pod = await self.engines.call(self._read)
            status = pod.status
            daemon = next((s for s in status.container_statuses or [] if s.name == "netspecd"), None)
            if daemon is not None and daemon.ready and status.pod_ip:
                self.pod, self.address = pod, status.pod_ip
                return
            ended = daemon is not None and daemon.state.terminated is not None
            why, late = _waiting(pod), loop.time() > deadline
            if status.phase in ("Failed", "Succeeded") or ended or why.startswith(NEVER) or late:
                began = daemon is not None and not daemon.state.waiting
                said = await self.engines.call(self._daemon_log) if began else ""
                log_dir.mkdir(parents=True, exist_ok=True)
                (log_dir / "netspecd.log").write_text(said)
                hint = ("; put the image in the cluster's runtime (netspec's: `ns_control image build`, then "
                        "the testbed's `python tests/k8stestbed.py import-image --image IMAGE`)"
                        if "ErrImageNeverPull" in why else "")
                raise ConnectionLost(self.name, detail=(
                    f"netspecd did not start in pod {self.namespace}/{self.pod_name} ({why or status.phase})"
                    f"{f' within {START_S:g} s' if late else ''}{hint}"
                    + (f"; it said:\n{said[-2000:]}" if said.strip() else "")))
            await asyncio.sleep(POLL_S)

    def _read(self) -> Any:
        assert self.cluster is not None
        return self.cluster.core.read_namespaced_pod(self.pod_name, self.namespace,
                                                     _request_timeout=API_TIMEOUT_S)

    def _daemon_log(self) -> str:
        assert self.cluster is not None
        try:
            return self.cluster.core.read_namespaced_pod_log(
                self.pod_name, self.namespace, container="netspecd", _request_timeout=API_TIMEOUT_S)
        except api_exception() as exc:
            return f"(its log could not be read: {exc.status} {exc.reason})"

    def reachable_at(self, facts: HostFacts) -> str:
        return self.address

    async def place(self, programs: list[str]) -> dict[str, str]:
        """Each program copied into the pod (PROGRAMS/<digest>/<name>), in one archive
        unpacked there by tar through the exec API. The archive goes as base64 on command
        lines (ARG_CHUNK a line): this client's exec protocol (v4) cannot close a command's
        stdin, so a tar reading it would never see its end."""
        if not programs:
            return {}
        data, placed = programs_archive(programs, PROGRAMS)
        await self.engines.call(self._unpack, data)
        return placed

    def _unpack(self, archive: bytes) -> None:
        text, staged = base64.b64encode(archive).decode(), f"{PROGRAMS}/.incoming.tar"
        for at in range(0, len(text), ARG_CHUNK):
            self._exec("netspecd", ["sh", "-c", 'printf %s "$1" | base64 -d >> "$2"', "sh",
                                    text[at:at + ARG_CHUNK], staged])
        self._exec("netspecd", ["sh", "-c", 'tar xf "$1" -C "$2" && rm -f -- "$1"', "sh", staged, PROGRAMS])

    def _exec(self, container: str, command: list[str], out: IO[bytes] | None = None) -> None:
        """`command` run in `container` of the pod through the exec API, its stdout into `out`.

        Raises:
            NetspecError: it could not be run, or it failed (what it said on stderr)."""
        from kubernetes.stream import stream
        from websocket import WebSocketException

        assert self.cluster is not None
        try:
            with self.cluster.exec_api() as core:
                ws = stream(core.connect_get_namespaced_pod_exec, self.pod_name, self.namespace,
                            container=container, command=command, stdin=False, stdout=True, stderr=True,
                            tty=False, _preload_content=False, binary=True)
                self._finish(ws, command, out)
        except (*api_errors(), WebSocketException, OSError) as exc:
            raise NetspecError(f"pod {self.namespace}/{self.pod_name}: {' '.join(command[:3])} could not "
                               f"be run in {container}: {exc}") from exc

    def _finish(self, ws: Any, command: list[str], out: IO[bytes] | None) -> None:
        from kubernetes.stream.ws_client import ERROR_CHANNEL

        err = b""
        try:
            deadline = time.monotonic() + API_TIMEOUT_S * 4
            while ws.is_open() and time.monotonic() < deadline:
                ws.update(timeout=1)
                if ws.peek_stdout():
                    chunk = ws.read_stdout()
                    if out is not None:
                        out.write(chunk)
                if ws.peek_stderr():
                    err += ws.read_stderr()
            if ws.is_open():
                raise NetspecError(f"pod {self.namespace}/{self.pod_name}: {' '.join(command[:3])} did not "
                                   f"end within {API_TIMEOUT_S * 4:g} s")
            status = ws.read_channel(ERROR_CHANNEL)
        finally:
            ws.close()
        said = status if isinstance(status, bytes) else (status or "").encode()
        if b'"Success"' not in said:  # no status at all: the stream was cut, its output too
            why = err.decode(errors="replace").strip() or said.decode(errors="replace") or "cut off"
            raise NetspecError(f"pod {self.namespace}/{self.pod_name}: {' '.join(command[:3])} failed: {why}")

    def placement(self) -> Placement | None:
        if self.pod is None or self.cluster is None:
            return None
        spec, status = self.pod.spec, self.pod.status
        daemon = next(c for c in spec.containers if c.name == "netspecd")
        image_id = next((s.image_id for s in status.container_statuses or [] if s.name == "netspecd"), "")
        return Placement(
            engine=self.cluster.server, node=spec.node_name or "", container_id=self.pod.metadata.uid,
            container=self.pod_name, created=True, image=daemon.image, image_id=image_id or "",
            network=self.namespace, context=self.cluster.context,
            limits=Limits(cpus=float(self.k8s.cpus) if self.k8s.cpus else None,
                          memory_bytes=memory_bytes(self.k8s.memory) if self.k8s.memory else None,
                          cap_add=list(self.k8s.cap_add)),
            kind="kubernetes")

    def run_files(self, run_id: str) -> PodRunFiles | None:
        if self.cluster is None:
            self.cluster = self.clusters.get(self.k8s)
        try:
            self.pod = self._read()
        except api_exception() as exc:
            if exc.status == 404:
                raise NetspecError(f"pod {self.namespace}/{self.pod_name} is gone (deleted?): its streams "
                                   "went with it") from None
            raise NetspecError(f"pod {self.namespace}/{self.pod_name}: {exc.status} {exc.reason}") from None
        try:
            self._exec("netspecd", [self._netspecd, "--kill-run", run_id, "--host", self.name])
        except NetspecError:
            # No netspecd container to run it in (it ended, the kubelet's status may lag):
            # nothing of the run runs there. One that runs and refused it is said.
            if self._daemon_running():
                raise
        return PodRunFiles(self, f"{WORK}/{safe_name(run_id, 'run id')}")

    def _daemon_running(self) -> bool:
        """Whether netspecd's container runs, by the kubelet's status within a few seconds
        (its status of a container just killed lags the runtime's)."""
        deadline = time.monotonic() + 5
        while True:
            self.pod = self._read()
            daemon = next((c for c in self.pod.status.container_statuses or [] if c.name == "netspecd"), None)
            if daemon is None or not daemon.state.running:
                return False
            if time.monotonic() > deadline:
                return True
            time.sleep(0.2)

    def _delete(self) -> list[str]:
        """This host's pod and Secret deleted, by name (one never made is no trouble); what
        could not be, said."""
        assert self.cluster is not None
        core, said = self.cluster.core, []
        for what, delete, name in (("Secret", core.delete_namespaced_secret, self.secret_name),
                                   ("pod", core.delete_namespaced_pod, self.pod_name)):
            delete_named(what, delete, name, self.namespace, said)
        self.pod = None
        return said

    def remove_leftovers(self) -> None:
        """For `collect`, after the run's controller died: this host's pod and Secret deleted,
        and the run's namespace (made for it: labelled with the run) once no pod of the run
        is left in it.

        Raises:
            NetspecError: what could not be removed."""
        said = self._delete()
        if self.k8s.namespace is None and not said:
            core, selector = self.cluster.core, f"{RUN_LABEL}={label(self.run_id)}"
            try:
                namespace = core.read_namespace(self.namespace, _request_timeout=API_TIMEOUT_S)
                left = core.list_namespaced_pod(self.namespace, label_selector=selector,
                                                _request_timeout=API_TIMEOUT_S).items
                if ((namespace.metadata.labels or {}).get(RUN_LABEL) == label(self.run_id)
                        and all(p.metadata.deletion_timestamp for p in left)):
                    core.delete_namespace(self.namespace, _request_timeout=API_TIMEOUT_S)
            except api_errors() as exc:
                if getattr(exc, "status", None) != 404:
                    said.append(f"namespace {self.namespace}: not removed: {api_said(exc)}")
        if said:
            raise NetspecError("; ".join(said))

    async def stop(self, run_id: str = "") -> list[str]:
        if self.keep:
            return []
        return await self.engines.call(self._stop)

    def _stop(self) -> list[str]:
        """The pod and its Secret deleted (netspecd ended its run and its files were fetched);
        the run's namespace after its last pod."""
        if self.making is not None and not self.making.cancel():
            # A start cancelled (another host failed) while its pod was being made: made to
            # its end first, so that what it made is deleted here, not left behind.
            concurrent.futures.wait([self.making], timeout=API_TIMEOUT_S * 3)
        if self.cluster is None:  # its kubeconfig refused: nothing made
            return []
        said = self._delete()
        if self.counted:
            self.counted = False
            said += self.cluster.left(self.namespace)
        return said


# What a pod's container waits for that will not come (no pull, a spec its runtime refuses).
NEVER = tuple(f"{name}: {reason}" for name in ("key", "netspecd", KEEPER) for reason in (
    "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError",
    "ErrImagePull", "ImagePullBackOff"))


def _waiting(pod: Any) -> str:
    """Why the pod waits, in the scheduler's or the kubelet's words (Unschedulable, or a
    container's ErrImageNeverPull, say)."""
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return f"{condition.reason}: {condition.message or ''}".strip(": ")
    for s in [*(pod.status.init_container_statuses or []), *(pod.status.container_statuses or [])]:
        waiting, ended = (s.state.waiting, s.state.terminated) if s.state else (None, None)
        if waiting and waiting.reason not in (None, "PodInitializing", "ContainerCreating"):
            return f"{s.name}: {waiting.reason}: {waiting.message or ''}".strip(": ")
        if ended and ended.exit_code:
            return f"{s.name}: exited {ended.exit_code}: {ended.message or ''}".strip(": ")
    return ""


class PodRunFiles(ArchiveRunFiles):
    """A run's directory in a pod, copied out by tar through the exec API into the keeper
    container (netspecd may have died), in one archive kept in a temporary file."""

    def __init__(self, host: PodHost, root: str):
        super().__init__(root, f"{host._where}, pod {host.namespace}/{host.pod_name}")
        self.host = host

    def _fetch(self, into: IO[bytes]) -> bool:
        parent, top = self.root.rsplit("/", 1)
        listed = io.BytesIO()
        self.host._exec(KEEPER, ["sh", "-c", 'test -d "$1" && echo yes || echo no', "sh", self.root],
                        out=listed)
        if listed.getvalue().strip() != b"yes":
            return False  # the run never wrote there
        self.host._exec(KEEPER, ["tar", "cf", "-", "-C", parent, top], out=into)
        return True

    def remove(self) -> None:
        """The archive dropped and the pod deleted, its directory with it; the namespace too if
        it was made for the run and no pod of the run is left in it."""
        self._drop()
        self.host.remove_leftovers()
