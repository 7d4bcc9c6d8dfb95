"""A Kubernetes cluster of a run's pod hosts (controller/hosts/pods.py), through the official
`kubernetes` Python client: its API client, made once per kubeconfig and context (as kubectl
chooses them: KUBECONFIG, else ~/.kube/config, and its current context, unless named); the
namespace made for a run and removed after its last pod; and what netspec made there for a
run, found again by its labels: a run's pods that `collect` must reach (`made_hosts`), and
what runs whose controller died left, for the next run in the cluster to collect and remove
(`dead_runs`, `remove_run`; controller/engine/leftovers.py). Every call is blocking, made in
the fleet's pool of engine calls (`Engines`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netspec.protocol.errors import NetspecError
from netspec.protocol.runplan import KubernetesSpec

from ..experiment.model import Host as HostSpec
from .leftovers import CONTROLLER_LABEL, HOST_LABEL, KEPT_LABEL, RUN_LABEL, controller_gone

API_TIMEOUT_S = 30.0


def label(value: str) -> str:
    """A name as a label value and a DNS-1123 name: lower case, letters, digits and '-'."""
    return "".join(c if c.isascii() and c.isalnum() else "-" for c in value.lower())[:63].strip("-")


class Cluster:
    """One cluster (a kubeconfig and a context) of a run's pods: its API client, made once,
    and the run's namespace, made by the first of its pods and removed after the last."""

    def __init__(self, kubeconfig: str | None, context: str | None):
        from kubernetes import client, config

        self.kubeconfig = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or \
            str(Path("~/.kube/config").expanduser())
        try:
            contexts, current = config.list_kube_config_contexts(self.kubeconfig)
            chosen = next((c for c in contexts if c["name"] == context), None) if context else current
            if chosen is None:
                raise NetspecError(f"kubeconfig {self.kubeconfig} has no context {context!r} (it has "
                                   f"{', '.join(c['name'] for c in contexts)})")
            self.context = chosen["name"]
            self.api_client = config.new_client_from_config(self.kubeconfig, context=self.context)
        except (OSError, config.ConfigException) as exc:
            raise NetspecError(f"kubeconfig {self.kubeconfig}: {exc}") from None
        self.core = client.CoreV1Api(self.api_client)
        self.server = self.api_client.configuration.host
        self._lock = threading.Lock()
        self._namespaces: dict[str, int] = {}  # made for the run: pods of ours in it

    @contextlib.contextmanager
    def exec_api(self):
        """A CoreV1Api of its own for one exec: the client's `stream` swaps its ApiClient's
        request method for a websocket's while it runs, so that any call made meanwhile on
        the shared one (another pod's deletion) would go out as a websocket and fail."""
        from kubernetes import client, config

        api_client = config.new_client_from_config(self.kubeconfig, context=self.context)
        try:
            yield client.CoreV1Api(api_client)
        finally:
            api_client.close()

    def namespace(self, name: str, run_id: str) -> None:
        """The run's namespace made (once), this pod counted in it."""
        from kubernetes.client import V1Namespace, V1ObjectMeta

        with self._lock:
            if name not in self._namespaces:
                self.core.create_namespace(V1Namespace(metadata=V1ObjectMeta(
                    name=name, labels={RUN_LABEL: label(run_id)})), _request_timeout=API_TIMEOUT_S)
                self._namespaces[name] = 0
            self._namespaces[name] += 1

    def left(self, name: str) -> list[str]:
        """A pod of the run's namespace gone: the namespace removed after its last; what
        could not be, said."""
        with self._lock:
            self._namespaces[name] -= 1
            if self._namespaces[name] > 0:
                return []
            del self._namespaces[name]
        said: list[str] = []
        delete_named("namespace", self.core.delete_namespace, name, None, said)
        return said

    @property
    def where(self) -> str:
        return f"cluster {self.context} ({self.server})"

    def close(self) -> None:
        self.api_client.close()


class Clusters:
    """The clusters of one fleet's pod hosts, each made once. Owned by the Fleet
    (engine/reach.py), closed at the run's end (engine/finish.py)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clusters: dict[tuple[str | None, str | None], Cluster] = {}

    def get(self, spec: KubernetesSpec) -> Cluster:
        with self._lock:
            key = (spec.kubeconfig, spec.context)
            if key not in self._clusters:
                self._clusters[key] = Cluster(spec.kubeconfig, spec.context)
            return self._clusters[key]

    def close(self) -> None:
        with self._lock:
            for cluster in self._clusters.values():
                cluster.close()
            self._clusters.clear()


def api_exception() -> type[Exception]:
    from kubernetes.client.exceptions import ApiException

    return ApiException


def api_errors() -> tuple[type[Exception], ...]:
    """What a call to the API raises: the cluster's refusal, or no answer at all (urllib3's
    retries and timeouts are neither OSError nor NetspecError)."""
    import urllib3

    return api_exception(), urllib3.exceptions.HTTPError


def api_said(exc: Exception) -> str:
    if isinstance(exc, api_exception()):
        return f"{exc.status} {exc.reason}"
    return f"no answer: {exc}"


def delete_named(what: str, delete: Callable[..., Any], name: str, namespace: str | None,
                 said: list[str]) -> bool:
    """`what` NAME (of `namespace`, None for a namespace itself) deleted through `delete`, a
    pod or a Secret at once (no grace); True if this call deleted it. One gone already (a
    404) is no trouble; one that could not be deleted is said in `said`."""
    args, options = (name,) if namespace is None else (name, namespace), {}
    if namespace is not None:
        options["grace_period_seconds"] = 0
    try:
        delete(*args, **options, _request_timeout=API_TIMEOUT_S)
    except api_errors() as exc:
        if getattr(exc, "status", None) != 404:
            where, done = (name, "removed") if namespace is None else (f"{namespace}/{name}", "deleted")
            said.append(f"{what} {where}: not {done}: {api_said(exc)}")
        return False
    return True


def made_hosts(specs: list[HostSpec], run_id: str, clusters: Clusters) -> list[HostSpec]:
    """Those of the pod hosts `specs` whose pod for run `run_id` is in its cluster, found by
    the run's label (one listing a cluster): `collect` reaches them though the run record
    never named them (its controller killed while they came up). A cluster that could not
    be asked keeps its hosts: their salvage says why."""
    hosts: dict[tuple[str | None, str | None], set[str] | None] = {}  # None: not asked
    found = []
    for spec in specs:
        assert spec.kubernetes is not None
        key = (spec.kubernetes.kubeconfig, spec.kubernetes.context)
        if key not in hosts:
            try:
                pods = clusters.get(spec.kubernetes).core.list_pod_for_all_namespaces(
                    label_selector=f"{RUN_LABEL}={label(run_id)}", _request_timeout=API_TIMEOUT_S).items
                hosts[key] = {(p.metadata.labels or {}).get(HOST_LABEL) for p in pods}
            except (NetspecError, *api_errors()):
                hosts[key] = None
        there = hosts[key]
        if there is None or label(spec.name) in there:
            found.append(spec)
    return found


def dead_runs(cluster: Cluster, current: str) -> dict[str, list[str]]:
    """The runs (but `current`) whose pods are in the cluster, made by a controller of this
    machine that is gone and not kept: run id -> its pods (NAMESPACE/NAME)."""
    found: dict[str, list[str]] = {}
    for pod in cluster.core.list_pod_for_all_namespaces(label_selector=f"{RUN_LABEL},{CONTROLLER_LABEL}",
                                                        _request_timeout=API_TIMEOUT_S).items:
        meta = pod.metadata
        made = meta.annotations or {}
        run, made_by = made.get(RUN_LABEL), made.get(CONTROLLER_LABEL)
        if run is None or made_by is None or run == current or KEPT_LABEL in (meta.labels or {}):
            continue
        if controller_gone(made_by):
            found.setdefault(run, []).append(f"pod {meta.namespace}/{meta.name}")
    return found


def remove_run(cluster: Cluster, run_id: str) -> list[str]:
    """What netspec made in the cluster for `run_id` and did not keep deleted: its pods, their
    Secrets, and the namespaces made for it. Returns what it deleted, each named ("pod
    NS/NAME", "Secret NS/NAME", "namespace NAME").

    Raises:
        NetspecError: what could not be deleted."""
    core, selector, removed, said = cluster.core, f"{RUN_LABEL}={label(run_id)}", [], []
    try:
        pods = core.list_pod_for_all_namespaces(label_selector=selector, _request_timeout=API_TIMEOUT_S).items
        secrets = core.list_secret_for_all_namespaces(label_selector=selector,
                                                      _request_timeout=API_TIMEOUT_S).items
        namespaces = core.list_namespace(label_selector=selector, _request_timeout=API_TIMEOUT_S).items
    except api_errors() as exc:
        raise NetspecError(f"what run {run_id} left was not listed: {api_said(exc)}") from None
    kept = {p.metadata.namespace for p in pods if KEPT_LABEL in (p.metadata.labels or {})}
    for what, delete, items in (("pod", core.delete_namespaced_pod, pods),
                                ("Secret", core.delete_namespaced_secret, secrets)):
        for item in items:
            meta = item.metadata
            if KEPT_LABEL in (meta.labels or {}) or (what == "pod" and meta.deletion_timestamp):
                continue
            if delete_named(what, delete, meta.name, meta.namespace, said):
                removed.append(f"{what} {meta.namespace}/{meta.name}")
    for namespace in namespaces:
        name = namespace.metadata.name
        if name in kept or namespace.status.phase == "Terminating":
            continue
        if delete_named("namespace", core.delete_namespace, name, None, said):
            removed.append(f"namespace {name}")
    if said:
        raise NetspecError("; ".join(said))
    return removed
