"""kubernetes: hosts on a real two-node cluster of the session's own (tests/k8stestbed.py,
the `k8s_cluster` fixture): a round trip between two pods on two nodes with its placement
recorded and nothing of the run left in the cluster after, CAMP from b's own cgroup; a pod whose netspecd
was killed mid-run salvaged through its keeper container; a pod deleted mid-run, its loss
said; a controller killed mid-run, its pods and namespace (found there by the run's labels)
removed by `collect`, or by the next run in the cluster; link conditions, a partition, kills,
pauses, restarts and pressures in pods; a group of 30 pods in a fan-out tree."""

import hashlib
import json
import subprocess
import textwrap
import time

import pytest
from netspec.controller.hosts.leftovers import RUN_LABEL
from netspec.datastream.reader import StreamReader
from support import REPO, latest_record, ns_control, session_dir, start_run, wait_for

kubernetes = pytest.importorskip("kubernetes")
TICKER = "import time\\nwhile True: print(time.time_ns(), flush=True); time.sleep(0.002)"
LATE_AT_MOST_NS = 400_000_000  # as tests/e2e/test_scheduled_faults.py's, on a loaded 2-core machine
# The first test's set-up brings the cluster up (15 s), or, on a machine whose cache lacks its
# binaries, builds them first (about 7 minutes, once per version: .ci/run builds them first).
pytestmark = pytest.mark.timeout(900)

ROUND_TRIPS = """\
experiment: pod-round-trips
hosts:
  a:
    kubernetes: {{prefix: {prefix}, node_selector: {{kubernetes.io/hostname: {node}}}}}
  b:
    kubernetes:
      {{prefix: {prefix}, cpus: 0.5, memory: 256m, node_selector: {{kubernetes.io/hostname: {node}2}}}}
components:
  server: {{host: a, program: {stimulus}, args: [--role, server]}}
  client: {{host: b, program: {stimulus}, args: [--role, client], params: {{count: 300, size: 64}}}}
services: {{clksync: {{reference: a}}, camp: {{interval_ms: 20}}}}
streams: {{stim: {{enable: [STIM]}}}}
analysis: {{pairs: {{to_server: {{start: STIM/send, end: STIM/stimulus}}}}}}
schedule:
  - launch
  - sync_clocks
  - start_logging
  - {{phase: listen, components: [server]}}
  - {{phase: run, components: [client], deadline: 30s}}
  - stop_logging
  - collect
"""


@pytest.fixture
def core(k8s_cluster, monkeypatch):
    """The cluster's API, and KUBECONFIG set for the runs (as kubectl would find it)."""
    from kubernetes import client, config

    monkeypatch.setenv("KUBECONFIG", str(k8s_cluster))
    api = config.new_client_from_config(str(k8s_cluster))
    yield client.CoreV1Api(api)
    api.close()


def first_node(core) -> str:
    """The testbed's first node (PREFIX-node; its second is PREFIX-node2)."""
    return min(n.metadata.name for n in core.list_node().items)


def own_prefix(letter: str) -> str:
    """A prefix of the session's own for a test's pods and namespace (lower case, as names
    in a cluster are)."""
    return letter + hashlib.sha256(session_dir().name.encode()).hexdigest()[:8]


def of_run(core, run_id: str) -> tuple[list, list]:
    """The pods and the namespaces that carry the run's label, anywhere in the cluster."""
    selector = f"{RUN_LABEL}={run_id.lower()}"
    return (core.list_pod_for_all_namespaces(label_selector=selector).items,
            [n for n in core.list_namespace(label_selector=selector).items
             if n.status.phase != "Terminating"])


def in_work(record: dict) -> bool:
    return (record.get("steps") or [{}])[-1].get("phase") == "work"


def test_two_pods_round_trip_their_placement_is_recorded_and_nothing_of_the_run_is_left(core, tmp_path,
                                                                                        k8s_cluster):
    prefix = own_prefix("p")
    stimulus = REPO / "experiments" / "stimulus_response" / "stimulus.py"
    node = first_node(core)
    (tmp_path / "exp.yaml").write_text(ROUND_TRIPS.format(prefix=prefix, stimulus=stimulus, node=node))
    done = ns_control("run", "exp.yaml", cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "ok"
    a, b = record["hosts"]["a"]["placement"], record["hosts"]["b"]["placement"]
    namespace = f"{prefix}-{record['id'].lower()}"
    # One run across the cluster's two nodes, each pod where its node_selector put it.
    assert (a["node"], b["node"]) == (node, f"{node}2"), (a, b)
    for placed, host in ((a, "a"), (b, "b")):
        assert placed["kind"] == "kubernetes", placed
        assert placed["network"] == namespace and placed["container"] == f"{namespace}-{host}", placed
        # the kubeconfig's current-context, the testbed's prefix
        assert placed["context"] == k8s_cluster.parent.name.removeprefix("netspec-k8s-"), placed
        assert placed["image_id"] and placed["container_id"], placed
    assert b["limits"] == {"cpus": 0.5, "memory_bytes": 256 << 20, "cap_add": ["NET_ADMIN", "SYS_NICE"]}
    assert "cpus" not in a["limits"]
    # Its daemon told its programs the pod's own address, not 127.0.0.1.
    assert "listening on 10." in done.stdout, done.stdout
    # One kernel, one clock: the truth of b's offset is 0, inside its bound.
    clock = record["hosts"]["b"]["clock"]
    assert clock["exchanges"] > 0 and abs(clock["offset_ns"]) <= clock["bound_ns"], clock
    assert "causality to_server: 300 matched, every end after its start" in done.stdout, done.stdout
    # CAMP read b's own cgroup (its netspecd container's, where its programs run), said so, and
    # its free memory is what b's 256 MiB leave.
    camp = [r for p in (tmp_path / "runs" / "latest" / "hosts" / "b" / "streams").glob("camp.*.ds")
            for r in StreamReader(p)]
    said = [r.value for r in camp if r.entity.full_name == "CAMP/warning"]
    assert any(w["kind"] == "cgroup" and "this pod's netspecd container's cgroup v" in w["message"]
               for w in said), said
    free = [r.value["mem_free"] for r in camp if r.entity.full_name == "CAMP/node"]
    assert free and all(0 < f <= 256 << 20 for f in free), free
    show = ns_control("show", "runs/latest", cwd=tmp_path)
    assert f"kubernetes cluster {a['context']}" in show.stdout, show.stdout
    assert f"node {node}," in show.stdout and f"node {node}2," in show.stdout, show.stdout
    # Nothing of the run is left: its pods, their Secrets and its namespace are gone.
    pods, namespaces = of_run(core, record["id"])
    assert pods == [] and namespaces == [], (pods, namespaces)
    secrets = core.list_secret_for_all_namespaces(label_selector=f"{RUN_LABEL}={record['id'].lower()}").items
    assert secrets == []


def ticks_in(core, pod, run_id: str, tmp_path) -> int:
    """The ticks component two's stream holds in the pod now, read by its keeper container."""
    from kubernetes.stream import stream

    data = stream(core.connect_get_namespaced_pod_exec, pod.metadata.name, pod.metadata.namespace,
                  container="keeper",
                  command=["sh", "-c", f"cat /var/lib/netspec/work/{run_id}/streams/play.two.*"],
                  stderr=False, stdin=False, stdout=True, tty=False, _preload_content=False, binary=True)
    body, deadline = b"", time.monotonic() + 30
    while data.is_open() and time.monotonic() < deadline:
        data.update(timeout=1)
        body += data.read_stdout() if data.peek_stdout() else b""
    data.close()
    (tmp_path / "live.ds").write_bytes(body)
    return sum(r.entity.name == "tick" for r in StreamReader(tmp_path / "live.ds")) if body else 0


def pod_of(core, record: dict, host: str):
    placed = record["hosts"][host].get("placement")
    if placed is None:
        return None
    return core.read_namespaced_pod(placed["container"], placed["network"])


def held_in_work(experiment, tmp_path, prefix: str, name: str, ticks: int) -> tuple[subprocess.Popen, dict]:
    """A run of pods a and b started, b's component (`ticks` written) held in phase 'work':
    the controller's process and the run's record once b's placement is in it."""
    path = experiment(textwrap.dedent(f"""\
        experiment: {name}
        hosts:
          a: {{kubernetes: {{prefix: {prefix}}}}}
          b: {{kubernetes: {{prefix: {prefix}}}}}
        components:
          one: {{host: a, program: ACTOR, args: ["work"], params: {{ticks: 10}}}}
          two: {{host: b, program: ACTOR, args: ["work"], params: {{ticks: {ticks}, hang_in: work}}}}
        streams: {{play: {{enable: [PLAY]}}}}
        schedule: [launch, start_logging, {{phase: work, deadline: 5m}}, collect]
        """))
    return start_run(path, tmp_path, lambda r: in_work(r) and "placement" in r["hosts"].get("b", {}),
                     "the run to reach phase 'work'", "--no-merge", timeout=120)


def test_a_pod_whose_netspecd_is_killed_mid_run_is_salvaged_through_its_keeper(core, experiment, tmp_path,
                                                                              k8s_cluster):
    proc, record = held_in_work(experiment, tmp_path, own_prefix("s"), "pod-salvage", 1000)
    try:
        pod = pod_of(core, record, "b")
        (daemon,) = [s for s in pod.status.container_statuses if s.name == "netspecd"]
        # the containerd of b's node: the testbed's first node's in its directory, the second's in node2/
        state = k8s_cluster.parent / ("node2" if pod.spec.node_name.endswith("-node2") else "")
        ctr = ["ctr", "--address", str(state / "containerd" / "containerd.sock"), "-n", "k8s.io"]
        task = daemon.container_id.removeprefix("containerd://")
        run_dir = tmp_path / "runs" / "latest"
        wait_for(lambda: ticks_in(core, pod, record["id"], tmp_path) == 1000, timeout=60,
                 what="component two's ticks to be flushed in pod b")
        subprocess.run([*ctr, "tasks", "kill", "-s", "SIGKILL", task], check=True, timeout=30)
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 1, stdout + stderr
        assert "host b: connection lost" in stderr, stderr
        record = latest_record(tmp_path / "runs")
        salvaged = record["hosts"]["b"]["salvaged"]
        assert salvaged["via"].endswith(f"pod {pod.metadata.namespace}/{pod.metadata.name}"), salvaged
        assert any(f.startswith("hosts/b/streams/play.two.") for f in salvaged["files"]), salvaged
        (stream,) = [f for f in salvaged["files"] if f.startswith("hosts/b/streams/play.two.")]
        assert sum(r.entity.name == "tick" for r in StreamReader(run_dir / stream)) == 1000
        pods, namespaces = of_run(core, record["id"])
        assert pods == [] and namespaces == [], (pods, namespaces)
    finally:
        if proc.poll() is None:
            proc.kill()


def killed_mid_run(experiment, tmp_path, prefix: str, name: str) -> dict:
    """A run of pods a and b (b's component writing its ticks, then held) whose controller is
    killed in phase 'work', with no clean-up of its own: its record."""
    path = experiment(textwrap.dedent(f"""\
        experiment: {name}
        hosts:
          a: {{kubernetes: {{prefix: {prefix}}}}}
          b: {{kubernetes: {{prefix: {prefix}}}}}
        components:
          one: {{host: a, command: [sleep, "600"], stop: collect}}
          two: {{host: b, program: ACTOR, args: ["work"], params: {{ticks: 10, hang_in: work}}}}
        streams: {{play: {{enable: [PLAY]}}}}
        schedule: [launch, start_logging, {{phase: work, deadline: 5m}}, collect]
        """), f"{name}.yaml")
    proc, record = start_run(path, tmp_path, in_work, "the run to reach phase 'work'", timeout=120)
    try:
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return record


def test_a_killed_controllers_pods_are_found_by_label_and_removed_by_collect(core, experiment, tmp_path):
    record = killed_mid_run(experiment, tmp_path, own_prefix("o"), "pod-orphaned")
    pods, namespaces = of_run(core, record["id"])
    assert len(pods) == 2 and len(namespaces) == 1, (pods, namespaces)
    # As though the controller was killed before it recorded b: collect finds b's pod by the
    # run's and the host's labels.
    path = tmp_path / "runs" / "latest" / "run.json"
    saved = json.loads(path.read_text())
    del saved["hosts"]["b"]
    path.write_text(json.dumps(saved))
    done = ns_control("collect", cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    salvaged = latest_record(tmp_path / "runs")["hosts"]["b"]["salvaged"]
    assert "hosts/b/two/stdout" in salvaged["files"] and salvaged["removed"], salvaged
    assert any(f.startswith("hosts/b/streams/play.two.") for f in salvaged["files"]), salvaged
    pods, namespaces = of_run(core, record["id"])
    assert pods == [] and namespaces == [], (pods, namespaces)


def test_the_next_run_in_a_cluster_collects_and_removes_what_a_killed_controllers_run_left(
        core, experiment, tmp_path):
    prefix = own_prefix("n")
    dead = killed_mid_run(experiment, tmp_path, prefix, "pod-dead")
    nothing = experiment(textwrap.dedent(f"""\
        experiment: next
        hosts: {{c: {{kubernetes: {{prefix: {prefix}}}}}}}
        components: {{three: {{host: c, command: ["true"]}}}}
        schedule: [launch, collect]
        """), "next.yaml")
    done = ns_control("run", "--no-merge", str(nothing), cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    namespace = f"{prefix}-{dead['id'].lower()}"
    said = (f"run {dead['id']}, whose controller is gone, left pod {namespace}/{namespace}-a, pod "
            f"{namespace}/{namespace}-b in cluster ")
    assert said in done.stdout, done.stdout
    assert f"collected into runs/pod-dead/{dead['id']} (" in done.stdout, done.stdout
    assert any(said in text for text in latest_record(tmp_path / "runs")["leftovers"])
    salvaged = json.loads((tmp_path / "runs" / "pod-dead" / dead["id"] / "run.json").read_text())
    assert any(f.startswith("hosts/b/streams/play.two.") for f in salvaged["hosts"]["b"]["salvaged"]["files"])
    pods, namespaces = of_run(core, dead["id"])
    assert pods == [] and namespaces == [], (pods, namespaces)


def test_a_pod_deleted_mid_run_is_a_lost_host_whose_streams_are_said_gone(core, experiment, tmp_path):
    proc, record = held_in_work(experiment, tmp_path, own_prefix("d"), "pod-deleted", 10)
    try:
        pod = pod_of(core, record, "b")
        core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stdout + stderr
    assert "host b: connection lost" in stderr, stderr
    record = latest_record(tmp_path / "runs")
    gone = f"pod {pod.metadata.namespace}/{pod.metadata.name} is gone (deleted?): its streams went with it"
    assert gone in record["hosts"]["b"]["salvaged"]["error"], record["hosts"]["b"]["salvaged"]
    assert gone in stdout, stdout
    assert record["hosts"]["a"]["salvaged"] is None or not record["hosts"]["a"]["salvaged"].get("error")
    pods, namespaces = of_run(core, record["id"])
    assert pods == [] and namespaces == [], (pods, namespaces)


FAULTS = """\
experiment: pod-faults
hosts:
  a: {{kubernetes: {{prefix: {prefix}}}}}
  b: {{kubernetes: {{prefix: {prefix}}}}}
components:
  killed: {{host: a, command: [sleep, "30"], start: launch, stop: after}}
  paused: {{host: a, command: [python3, -c, "{ticker}"], start: launch, stop: after}}
  restarted: {{host: a, command: "echo started $$; exec sleep 30", start: launch, stop: after}}
  waiter: {{host: b, command: [sleep, "1.2"], start: work}}
schedule: [launch, sync_clocks, {{phase: work, need: 1}}, start_logging, after, collect]
faults:
  - {{kill: killed, at: {{phase: work, after: 200ms}}}}
  - {{pause: paused, at: {{phase: work, after: 200ms}}, for: 300ms}}
  - {{restart: restarted, at: {{phase: work, after: 500ms}}}}
  - {{cpu: a, at: {{phase: work, after: 0s}}, for: 400ms}}
  - {{memory: b, at: {{phase: work, after: 0s}}, for: 300ms, size: 32MB}}
"""


def test_kills_pauses_restarts_and_pressures_are_done_in_pods_as_the_kernel_saw_them(core, tmp_path):
    """The faults of tests/e2e/test_scheduled_faults.py done by each pod's netspecd to its own
    processes: none early, none lost, each with the effect the pod's kernel showed."""
    (tmp_path / "faults.yaml").write_text(FAULTS.format(prefix=own_prefix("f"), ticker=TICKER))
    done = ns_control("run", "--no-merge", "faults.yaml", cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "ok"
    faults = {f["kind"]: f for f in record["faults"]}
    for fault in faults.values():
        assert not fault.get("error"), fault
        assert -fault["bound_ns"] <= fault["late_ns"] < LATE_AT_MOST_NS, fault  # never early
    ends = record["components"]
    assert ends["a/killed"]["returncode"] == -9 and ends["a/killed"]["scheduled"]
    run = tmp_path / "runs" / "latest" / "hosts" / "a"
    pids = [int(line.split()[1]) for line in (run / "restarted" / "stdout").read_text().splitlines()]
    assert len(pids) == 2 and pids[0] != pids[1]
    assert faults["restart"]["effect"].endswith(f"started again as pid {pids[1]}"), faults["restart"]
    ticks = [int(t) for t in (run / "paused" / "stdout").read_text().split()]
    gap = max(range(1, len(ticks)), key=lambda i: ticks[i] - ticks[i - 1])
    pause = faults["pause"]
    assert ticks[gap - 1] <= pause["effect_ns"] and ticks[gap] >= pause["done_ns"] + 300_000_000
    assert faults["cpu"]["measured"]["cpu_s"] > 0.02, faults["cpu"]
    assert faults["memory"]["measured"]["rss_bytes"] >= 32e6, faults["memory"]
    pods, namespaces = of_run(core, record["id"])
    assert pods == [] and namespaces == [], (pods, namespaces)


def test_link_conditions_and_a_partition_hold_between_pods(core, tmp_path):
    """A delay each way, put on by each pod's netspecd in the pod's own network namespace (the
    capability NET_ADMIN, the image's nftables and iptables), and a scheduled partition. A
    stimulus's one-way time cannot be under the delay, and is above it by what the end
    systems and the user-space path add (a few ms at most here); the partition's effect is
    its rule's first dropped packet."""
    prefix = own_prefix("l")
    stimulus = REPO / "experiments" / "stimulus_response" / "stimulus.py"
    text = ROUND_TRIPS.format(prefix=prefix, stimulus=stimulus, node=first_node(core)).replace(
        "schedule:", textwrap.dedent("""\
        links:
          - {between: [a, b], delay: 5ms}
        faults:
          - {at: {phase: run, after: 50ms}, partition: [a, b], for: 100ms}
        schedule:"""))
    (tmp_path / "exp.yaml").write_text(text)
    done = ns_control("run", "exp.yaml", cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    run = tmp_path / "runs" / "latest"
    import duckdb

    with duckdb.connect() as db:
        rtts = [r[0] for r in db.sql(f"SELECT duration_ns FROM '{run}/merged/intervals.parquet' "
                                     "WHERE name = 'to_server'").fetchall()]
        (fault,) = db.sql(f"SELECT kind, effect, late_ns FROM '{run}/merged/faults.parquet'").fetchall()
    # One crossing of 5 ms, client to server, with the user-space path's own lateness on a
    # loaded 2-core machine (up to a few ms).
    assert len(rtts) == 300 and 5.0e6 <= sorted(rtts)[150] < 5.0e6 + 3e6, sorted(rtts)[150]
    assert fault[0] == "partition" and fault[1].startswith("its rule dropped a first packet"), fault
    assert fault[2] < 50_000_000, fault  # half its length: on a loaded machine, tens of ms
    pods, namespaces = of_run(core, latest_record(tmp_path / "runs")["id"])
    assert pods == [] and namespaces == [], (pods, namespaces)


GROUP = 30


def test_a_group_of_30_pods_in_a_fan_out_tree_comes_up_and_its_end_leaves_no_pod_and_no_namespace(
        core, experiment, tmp_path):
    prefix = own_prefix("g")
    path = experiment(textwrap.dedent(f"""\
        experiment: pod-group
        fan_out: 5
        hosts: {{box: {{count: {GROUP}, kubernetes: {{prefix: {prefix}}}}}}}
        components: {{idle: {{group: box, command: [sleep, "600"], stop: collect}}}}
        schedule: [launch, start_logging, collect]
        """))
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    record = latest_record(tmp_path / "runs")
    assert len(record["hosts"]) == GROUP and record["status"] == "ok"
    # Each pod its own address, all of them on the one node.
    assert len({info["address"] for info in record["hosts"].values()}) == GROUP
    # The scheduler spreads them (least allocated first) over both nodes.
    assert len({info["placement"]["node"] for info in record["hosts"].values()}) == 2
    # The controller's 5 hosts each relay to 5 more, pod to pod.
    assert record["fan_out"]["relays"] == 5, record["fan_out"]
    assert "not stopped" not in done.stdout + done.stderr
    pods, namespaces = of_run(core, record["id"])
    assert pods == [] and namespaces == [], (pods, namespaces)
