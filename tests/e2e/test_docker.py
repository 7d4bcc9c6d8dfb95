"""docker: hosts on this machine's engine: containers made for the run on its own network,
one attached by label, placement recorded, a container killed mid-run salvaged through
the engine, the containers' clocks and CAMP figures checked against what is true of them.
Everything the test makes is named for the session and removed after."""

import io
import json
import os
import subprocess
import tarfile
import textwrap
import time
import zlib
from pathlib import Path

import pytest
from netspec.analysis.provenance import host_facts, shared_kernels
from netspec.datastream.reader import StreamReader
from support import latest_record, ns_control, remove_named, session_dir, start_run, wait_for

docker = pytest.importorskip("docker")

TEXT = """\
experiment: containers
hosts:
  a: {{docker: {{image: "{image}", prefix: {prefix}, cpus: 0.5, memory: 256m}}}}
  b: {{docker: {{image: "{image}", prefix: {prefix}}}}}
  c: {{docker: {{label: "org.netspec.test={prefix}", prefix: {prefix}}}}}
components:
  one: {{host: a, program: ACTOR, args: ["prepare,work"]}}
  two: {{host: b, program: ACTOR, args: ["prepare,work"], params: {{ticks: 1000, hang_in: work}}}}
  three: {{host: c, program: ACTOR, args: ["prepare,work"]}}
services: {{camp: {{interval_ms: 50}}}}
streams: {{play: {{enable: [PLAY]}}}}
schedule: [launch, sync_clocks, start_logging, prepare, {{phase: work, deadline: 5m}}, collect]
"""
MIB = 1 << 20


def attach_to(client, image: str, prefix: str):
    """A container of the session's that runs already, for a host to attach to by the label
    org.netspec.test=`prefix`."""
    return client.containers.run(image, ["sleep", "infinity"], name=f"{prefix}-attached",
                                 labels={"org.netspec.test": prefix}, detach=True, init=True)


def ticks_in(container, run_id: str, tmp_path) -> int:
    """The ticks component two's stream holds on the container's disk now."""
    try:
        stream, _ = container.get_archive(f"/var/lib/netspec/work/{run_id}/streams")
    except docker.errors.NotFound:
        return 0
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        found = 0
        for member in tar.getmembers():
            if member.isreg() and member.name.startswith("streams/play.two."):
                path = tmp_path / "live.ds"
                path.write_bytes(tar.extractfile(member).read())
                found += sum(r.entity.name == "tick" for r in StreamReader(path))
        return found


def test_containers_are_placed_as_recorded_and_one_killed_mid_run_is_salvaged_through_the_engine(
        docker_image, experiment, tmp_path):
    client = docker.from_env()
    prefix = f"{session_dir().name}-d"
    attached = attach_to(client, docker_image, prefix)
    proc = None
    try:
        path = experiment(textwrap.dedent(TEXT.format(image=docker_image, prefix=prefix)))
        in_work = lambda r: (r.get("steps") or [{}])[-1].get("phase") == "work"  # noqa: E731
        proc, record = start_run(path, tmp_path, in_work, "the run to reach phase 'work'", "--no-merge",
                                 timeout=120)
        killed = client.containers.get(record["hosts"]["b"]["placement"]["container_id"])
        wait_for(lambda: ticks_in(killed, record["id"], tmp_path) == 2000, timeout=60,
                 what="component two's ticks to be flushed in container b")
        killed.kill()
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 1, stderr
        assert "host b: connection lost" in stderr

        record = latest_record(tmp_path / "runs")
        run = tmp_path / "runs" / "latest"
        # b's streams came out of its dead container through the engine, whole.
        salvaged = record["hosts"]["b"]["salvaged"]
        assert salvaged["via"] == f"the local engine, container {killed.name}", salvaged
        assert salvaged["removed"]
        assert f"[salvaged host b: {len(salvaged['files'])} files" in stdout
        (stream,) = [f for f in salvaged["files"] if f.startswith("hosts/b/streams/play.two.")]
        assert sum(r.entity.name == "tick" for r in StreamReader(run / stream)) == 2000

        # Placement as the engine made it.
        a, c = record["hosts"]["a"]["placement"], record["hosts"]["c"]["placement"]
        info = client.info()
        assert a["limits"] == {"cpus": 0.5, "memory_bytes": 256 * MIB, "cap_add": ["NET_ADMIN", "SYS_NICE"]}
        assert (a["engine"], a["node"], a["engine_id"]) == ("local", info["Name"], info["ID"])
        assert a["image_id"] == client.images.get(docker_image).id and a["created"]
        assert a["cgroup"] == f"/docker/{a['container_id']}"
        assert a["cgroup_version"] == int(info["CgroupVersion"])
        assert a["network"] == f"{prefix}-{record['id']}"
        assert (c["container_id"], c.get("created", False)) == (attached.id, False)
        assert shared_kernels(host_facts(run, "abc")) == [["a", "b", "c"]]

        # One kernel, one clock: the truth of every offset is 0, inside each bound.
        for host in "bc":
            clock = record["hosts"][host]["clock"]
            assert clock["exchanges"] > 0 and abs(clock["offset_ns"]) <= clock["bound_ns"], (host, clock)

        # CAMP read a's cgroup, said so, and its free memory is what a's 256 MiB leave.
        camp = [r for p in (run / "hosts" / "a" / "streams").glob("camp.*.ds") for r in StreamReader(p)]
        said = [r.value for r in camp if r.entity.full_name == "CAMP/warning"]
        assert any(w["kind"] == "cgroup" and "cgroup v" in w["message"] for w in said), said
        free = [r.value["mem_free"] for r in camp if r.entity.full_name == "CAMP/node"]
        assert free and all(0 < f <= 256 * MIB for f in free), free

        # Nothing of the run is left in the engine: its containers and network are gone, the
        # attached container left the network and runs on.
        assert [x.name for x in client.containers.list(all=True, filters={"name": prefix})] == [attached.name]
        assert client.networks.list(names=[f"{prefix}-{record['id']}"]) == []
        attached.reload()
        assert attached.status == "running"
        assert list(attached.attrs["NetworkSettings"]["Networks"]) == ["bridge"]
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        remove_named(client, prefix)
        client.close()


TWO_ENGINES = """\
experiment: two-engines
hosts:
  a: {{docker: {{image: "{image}", prefix: {prefix}}}}}
  b: {{docker: {{image: "{image}", prefix: {prefix}, engine: "{engine}", cpus: 1}}}}
  c:
    docker: {{image: "{image}", prefix: {prefix}, engine: "{tcp}",
              tls: {{ca: "{tls}/ca.pem", cert: "{tls}/client-cert.pem", key: "{tls}/client-key.pem"}}}}
components:
  one: {{host: a, program: ACTOR, args: ["work"], params: {{ticks: 10}}}}
  two: {{host: b, program: ACTOR, args: ["work"], params: {{ticks: 10}}}}
  three: {{host: c, program: ACTOR, args: ["work"], params: {{ticks: 10}}}}
streams: {{play: {{enable: [PLAY]}}}}
schedule: [launch, sync_clocks, start_logging, work, collect]
"""


def test_one_run_spans_containers_of_two_engines_the_second_reached_over_ssh_and_over_tcp_with_tls(
        docker_image, own_host, experiment, tmp_path):
    import nethosts as nh

    name = f"{session_dir().name}-e{own_host.index}"
    engine = nh.start_dockerd(own_host, name, session_dir() / name)
    local = docker.from_env()
    try:
        second = docker.DockerClient(base_url=engine.url)
        second.images.load(local.images.get(docker_image).save(named=True))  # no registry: save, load
        nh.set_sshd_env(own_host, DOCKER_HOST=engine.url)  # what `docker system dial-stdio` dials there
        home = tmp_path / "home"
        (home / ".ssh").mkdir(parents=True)  # the Docker SDK's ssh:// reads ~/.ssh as OpenSSH does
        (home / ".ssh" / "config").write_text(f"Host {own_host.address}\n  IdentityFile "
                                              f"{own_host.state / 'id_ed25519'}\n")
        (home / ".ssh" / "known_hosts").write_text(own_host.known_hosts_line + "\n")
        url = f"ssh://root@{own_host.address}"
        tcp, tls = f"tcp://{own_host.address}:{nh.TLS_PORT}", engine.dir / "tls"
        path = experiment(TWO_ENGINES.format(image=docker_image, prefix=name, engine=url, tcp=tcp, tls=tls))
        done = ns_control("run", "--no-merge", str(path), cwd=tmp_path, timeout=180,
                          env={**os.environ, "HOME": str(home)})
        assert done.returncode == 0, done.stdout + done.stderr
        record = latest_record(tmp_path / "runs")
        a, b = record["hosts"]["a"]["placement"], record["hosts"]["b"]["placement"]
        c = record["hosts"]["c"]["placement"]
        assert (a["engine"], b["engine"], c["engine"]) == ("local", url, tcp)
        assert c["container_id"] != b["container_id"] and c["engine_id"] == b["engine_id"]
        assert b["engine_id"] == second.info()["ID"]  # the machine's key's (/etc/docker), as a's
        assert b["image_id"] == a["image_id"] == local.images.get(docker_image).id  # the same image, loaded
        assert b["limits"]["cpus"] == 1.0 and "cpus" not in a["limits"]
        assert record["hosts"]["b"]["address"].startswith(f"{own_host.address}:")  # its port published there
        for host in "bc":  # across engines, one kernel: the truth is 0
            clock = record["hosts"][host]["clock"]
            assert clock["exchanges"] > 0 and abs(clock["offset_ns"]) <= clock["bound_ns"], (host, clock)
        # Each engine is left as it was: no container, no network of the run.
        for client in (local, second):
            assert client.containers.list(all=True, filters={"name": name}) == []
            assert client.networks.list(filters={"name": name}) == []
        second.close()
    finally:
        remove_named(local, name)
        local.close()
        nh.stop_dockerd(engine)
    # The second engine's rules were its namespace's: the machine's firewall never named it.
    rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
    assert engine.bridge not in rules and name not in rules


def test_a_killed_controllers_containers_end_their_run_and_collect_copies_out_what_they_kept(
        docker_image, experiment, tmp_path):
    client = docker.from_env()
    prefix = f"{session_dir().name}-k"
    path = experiment(textwrap.dedent(f"""\
        experiment: orphaned
        hosts: {{a: {{docker: {{image: "{docker_image}", prefix: {prefix}}}}}}}
        components:
          one: {{host: a, program: ACTOR, args: ["work"], params: {{ticks: 10, hang_in: work}}}}
        streams: {{play: {{enable: [PLAY]}}}}
        schedule: [launch, start_logging, {{phase: work, deadline: 5m}}, collect]
        """))
    in_work = lambda r: (r.get("steps") or [{}])[-1].get("phase") == "work"  # noqa: E731
    proc, record = start_run(path, tmp_path, in_work, "the run to reach phase 'work'", timeout=120)
    container = client.containers.get(f"{prefix}-{record['id']}-a")
    try:
        proc.kill()  # no clean-up of its own: the container's lifeline (its stdin) ends with it
        proc.communicate(timeout=30)

        def exited():
            container.reload()
            return container.status == "exited"
        wait_for(exited, timeout=30, what="the orphaned container to end")
        done = ns_control("collect", cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"over the local engine, container {container.name}; " in done.stdout
        salvaged = latest_record(tmp_path / "runs")["hosts"]["a"]["salvaged"]
        assert "hosts/a/one/stdout" in salvaged["files"] and salvaged["removed"], salvaged
        assert any(f.startswith("hosts/a/streams/play.one.") for f in salvaged["files"])
        assert client.containers.list(all=True, filters={"name": prefix}) == []
        assert client.networks.list(filters={"name": prefix}) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        remove_named(client, prefix)
        client.close()


FLEET = 12


def most_at_once(events: list[dict], opened: str, closed: str) -> int:
    """The most containers that were at once between their `opened` and `closed` events, by
    the engine's own times of them."""
    actions: dict[str, dict[str, int]] = {}
    for event in events:
        actions.setdefault(event["Actor"]["Attributes"]["name"], {}).setdefault(event["Action"],
                                                                               event["timeNano"])
    # At one instant an end counts before a beginning: spans that only touch never overlap.
    edges = sorted(edge for done in actions.values() if opened in done and closed in done
                   for edge in ((done[opened], 1), (done[closed], -1)))
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_a_group_of_containers_comes_up_at_once_and_its_end_leaves_no_container_and_no_network(
        docker_image, experiment, tmp_path):
    # How long the fleet takes to come up and to go is bench/containers.py's (up_s, end_s):
    # here, that the engine made and removed the containers side by side, by its own times.
    client = docker.from_env()
    prefix = f"{session_dir().name}-g"
    path = experiment(textwrap.dedent(f"""\
        experiment: fleet
        hosts: {{box: {{count: {FLEET}, docker: {{image: "{docker_image}", prefix: {prefix}}}}}}}
        components: {{idle: {{group: box, command: [sleep, "600"], stop: collect}}}}
        schedule: [launch, start_logging, collect]
        """))
    try:
        since = int(time.time()) - 1  # the engine's clock is this machine's
        done = ns_control("run", "--no-merge", str(path), cwd=tmp_path, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        record = latest_record(tmp_path / "runs")
        assert len(record["hosts"]) == FLEET
        assert client.containers.list(all=True, filters={"name": prefix}) == []
        assert client.networks.list(filters={"name": prefix}) == []
        assert "not stopped" not in done.stdout + done.stderr
        events = [e for e in client.events(since=since, until=int(time.time()) + 1, decode=True,
                                          filters={"type": "container"})
                  if e["Actor"]["Attributes"].get("name", "").startswith(prefix)]
        assert most_at_once(events, "create", "start") > 1, "the containers were made one after another"
        assert most_at_once(events, "kill", "destroy") > 1, "the containers were removed one after another"
    finally:
        remove_named(client, prefix)
        client.close()


KEYHUNT = Path(__file__).parents[1] / "programs" / "keyhunt.py"


def daemons_in(container) -> list[str]:
    """The netspecd processes running in `container` (their command lines)."""
    code, out = container.exec_run(["python3", "-c", (
        "import os\n"
        "for p in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try: a = open(f'/proc/{p}/cmdline', 'rb').read().split(b'\\0')\n"
        "    except OSError: continue\n"
        "    if any(x.endswith(b'netspecd') for x in a[:2]): print(b' '.join(a).decode())\n")])
    assert code == 0, out
    return out.decode().splitlines()


@pytest.fixture
def engine(request):
    """This machine's engine and a name of the session's for what a test makes in it, all of
    which is removed after."""
    client = docker.from_env()
    prefix = f"{session_dir().name}-{zlib.crc32(request.node.name.encode()):08x}"
    yield client, prefix
    remove_named(client, prefix)
    client.close()


def held_in_work(experiment, tmp_path, docker: str):
    """A run of one component on host c (`docker: {DOCKER}`) started, and held in phase
    work: the controller's process and the run's record."""
    path = experiment(textwrap.dedent(f"""\
        experiment: orphaned
        hosts: {{c: {{docker: {{{docker}}}}}}}
        components:
          one: {{host: c, program: ACTOR, args: ["work"], params: {{ticks: 10, hang_in: work}}}}
        schedule: [launch, {{phase: work, deadline: 5m}}, collect]
        """))
    in_work = lambda r: (r.get("steps") or [{}])[-1].get("phase") == "work"  # noqa: E731
    return start_run(path, tmp_path, in_work, "the run to reach phase 'work'", "--no-merge", timeout=120)


def test_a_container_hosts_daemon_holds_a_key_of_its_run_alone_which_its_programs_cannot_read(
        docker_image, engine, experiment, key, tmp_path):
    client, prefix = engine
    attached = attach_to(client, docker_image, prefix)
    path = experiment(textwrap.dedent(f"""\
        experiment: keys
        hosts:
          a: {{docker: {{image: "{docker_image}", prefix: {prefix}}}}}
          c: {{docker: {{label: "org.netspec.test={prefix}", prefix: {prefix}}}}}
        components:
          one: {{host: a, program: {KEYHUNT}, args: [hunt]}}
          two: {{host: c, program: {KEYHUNT}, args: [hunt]}}
        schedule: [launch, hunt, collect]
        """))
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    run = tmp_path / "runs" / "latest"
    for host, component in (("a", "one"), ("c", "two")):
        found = json.loads((run / "hosts" / host / component / "stdout").read_text().splitlines()[-1])
        # No key file is left for the program to find, and the daemon's memory, environment
        # and maps are closed to it; its own memory it reads the same way.
        assert found["files"] == {}, (host, found)
        assert found["daemons"], (host, found)
        for said in found["daemons"].values():
            assert all(v.startswith("refused: ") for v in said.values()), (host, found)
        assert found["self"] == {"maps": "read", "environ": "read", "mem": "read"}
    # The attached container, after the run: no key of any kind left in it, the long-term
    # key never in it, and no netspecd.
    look = f"ls -A /etc/netspec; grep -rl {key.hex()} /etc /tmp /var/lib 2>/dev/null; true"
    code, out = attached.exec_run(["sh", "-c", look])
    assert (code, out.decode()) == (0, ""), out
    assert daemons_in(attached) == []


def test_the_netspecd_of_an_attached_container_ends_when_its_controller_is_killed(
        docker_image, engine, experiment, tmp_path):
    client, prefix = engine
    attached = attach_to(client, docker_image, prefix)
    proc, _ = held_in_work(experiment, tmp_path, f'label: "org.netspec.test={prefix}", prefix: {prefix}')
    try:
        assert len(daemons_in(attached)) == 1
        proc.kill()  # no clean-up of its own: the exec's stdin, netspecd's lifeline, ends with it
        proc.communicate(timeout=30)
        wait_for(lambda: daemons_in(attached) == [], timeout=30,
                 what="the attached container's netspecd to end with its controller")
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_second_run_on_an_attached_container_in_use_is_refused_at_once_naming_the_other(
        docker_image, engine, experiment, tmp_path):
    """It once failed after 30 s with "netspecd did not start" (the first run's netspecd held
    its port); with --share-hosts it runs beside the first."""
    client, prefix = engine
    attached = attach_to(client, docker_image, prefix)
    (tmp_path / "first").mkdir()
    proc, record = held_in_work(experiment, tmp_path / "first", f'label: "org.netspec.test={prefix}", '
                                f"prefix: {prefix}")
    try:
        second = experiment(textwrap.dedent(f"""\
            experiment: second
            hosts: {{c: {{docker: {{label: "org.netspec.test={prefix}", prefix: {prefix}}}}}}}
            components:
              one: {{host: c, program: ACTOR, args: ["work"], params: {{ticks: 3}}}}
            schedule: [launch, work, collect]
            """))
        began = time.monotonic()
        refused = ns_control("run", str(second), "--no-merge", cwd=tmp_path, timeout=120)
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert time.monotonic() - began < 15
        said = refused.stdout + refused.stderr
        assert f"container {attached.name} is in use by run '{record['id']}'" in said, said
        assert "--share-hosts" in said
        shared = ns_control("run", str(second), "--no-merge", "--share-hosts", cwd=tmp_path, timeout=120)
        assert shared.returncode == 0, shared.stdout + shared.stderr
        assert len(daemons_in(attached)) == 1  # the first run's, still held in work
    finally:
        proc.kill()
        proc.communicate(timeout=30)


def test_a_fan_out_tree_of_containers_relays_to_each_child_with_that_childs_own_key(
        docker_image, engine, experiment, tmp_path):
    _, prefix = engine
    path = experiment(textwrap.dedent(f"""\
        experiment: tree
        fan_out: 2
        hosts: {{box: {{count: 4, docker: {{image: "{docker_image}", prefix: {prefix}}}}}}}
        components: {{one: {{group: box, program: ACTOR, args: [work], params: {{ticks: 1}}}}}}
        schedule: [launch, work, collect]
        """))
    done = ns_control("run", "--no-merge", str(path), cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    record = latest_record(tmp_path / "runs")
    assert record["fan_out"]["relays"] == 1, record["fan_out"]  # one host relays to two others
    assert [s["status"] for s in record["steps"]] == ["ok"] * 3, record["steps"]


def test_the_next_run_on_an_engine_collects_and_removes_what_a_killed_controllers_run_left_there(
        docker_image, engine, experiment, tmp_path):
    client, prefix = engine
    proc, dead = held_in_work(experiment, tmp_path, f'image: "{docker_image}", prefix: {prefix}')
    container = client.containers.get(f"{prefix}-{dead['id']}-c")
    proc.kill()
    proc.communicate(timeout=30)

    def exited():
        container.reload()
        return container.status == "exited"
    wait_for(exited, timeout=30, what="the orphaned container to end")
    nothing = experiment(textwrap.dedent(f"""\
        experiment: next
        hosts: {{b: {{docker: {{image: "{docker_image}", prefix: {prefix}}}}}}}
        components: {{two: {{host: b, command: ["true"]}}}}
        schedule: [launch, collect]
        """), "next.yaml")
    done = ns_control("run", "--no-merge", str(nothing), cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    said = (f"run {dead['id']}, whose controller is gone, left {container.name} in the local engine: "
            f"collected into runs/orphaned/{dead['id']} (")
    assert said in done.stdout, done.stdout
    assert any(said in text for text in latest_record(tmp_path / "runs")["leftovers"])
    # Gathered as `collect` gathers, and nothing of the dead run is left in the engine.
    salvaged = json.loads((tmp_path / "runs" / "orphaned" / dead["id"] / "run.json").read_text())
    salvaged = salvaged["hosts"]["c"]["salvaged"]
    assert "hosts/c/one/stdout" in salvaged["files"] and salvaged["removed"], salvaged
    assert client.containers.list(all=True, filters={"label": f"org.netspec.run={dead['id']}"}) == []
    assert client.networks.list(names=[f"{prefix}-{dead['id']}"]) == []


def test_what_a_run_made_in_its_engine_and_its_hosts_left_is_removed_by_label_at_its_end(
        docker_image, engine, experiment, tmp_path):
    client, prefix = engine
    waiter = Path(__file__).parents[1] / "programs" / "waiter.py"
    path = experiment(textwrap.dedent(f"""\
        experiment: stray
        hosts: {{c: {{docker: {{image: "{docker_image}", prefix: {prefix}}}}}}}
        components: {{one: {{host: c, program: {waiter}, args: [work], params: {{dir: /tmp}}}}}}
        schedule: [launch, {{phase: work, deadline: 5m}}, collect]
        """))
    in_work = lambda r: (r.get("steps") or [{}])[-1].get("phase") == "work"  # noqa: E731
    proc, record = start_run(path, tmp_path, in_work, "the run to reach phase 'work'", "--no-merge",
                             timeout=120)
    try:
        # A container of the run's that no host of it stops (one whose host's stop failed).
        stray = client.containers.create(docker_image, ["sleep", "600"], name=f"{prefix}-stray",
                                         labels={"org.netspec.run": record["id"], "org.netspec.created": "1"})
        ours = client.containers.get(f"{prefix}-{record['id']}-c")
        assert ours.exec_run(["touch", "/tmp/work.go"]).exit_code == 0
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    said = (f"the local engine: container {stray.name} of the run left after its hosts stopped: removed")
    assert said in stdout, stdout + stderr
    assert proc.returncode == 3  # partial: something of the run did not stop as it should, said
    assert said in latest_record(tmp_path / "runs")["error"]["causes"]
    assert client.containers.list(all=True, filters={"label": f"org.netspec.run={record['id']}"}) == []


RESOLVE = "import socket, sys; print(*(socket.gethostbyname(n) for n in sys.argv[1:]))"


def test_the_hosts_of_a_docker_run_resolve_each_other_by_name_on_its_network(
        docker_image, experiment, tmp_path):
    # Docker's DNS on the run's network answers each container's host name (its hostname)
    # and container name; /etc/hosts holds only a container's own.
    client = docker.from_env()
    prefix = f"{session_dir().name}-dns"
    path = experiment(textwrap.dedent(f"""\
        experiment: named
        hosts:
          a: {{docker: {{image: "{docker_image}", prefix: {prefix}}}}}
          b: {{docker: {{image: "{docker_image}", prefix: {prefix}}}}}
        components:
          ask: {{host: b, command: [python3, -c, "{RESOLVE}", a, b], start: run}}
          hosts: {{host: b, command: [cat, /etc/hosts], start: run}}
        schedule: [launch, run, collect]
        """))
    try:
        done = ns_control("run", "--no-merge", str(path), cwd=tmp_path, timeout=180)
        assert done.returncode == 0, done.stdout + done.stderr
        record = latest_record(tmp_path / "runs")
        run = tmp_path / "runs" / "latest" / "hosts" / "b"
        a, b = (run / "ask" / "stdout").read_text().split()
        # The truth: where the controller reached each host's daemon, by the engine's own account.
        assert a == record["hosts"]["a"]["address"].rsplit(":", 1)[0]
        assert b == record["hosts"]["b"]["address"].rsplit(":", 1)[0]
        assert a not in (run / "hosts" / "stdout").read_text()  # not from b's /etc/hosts
    finally:
        remove_named(client, prefix)
        client.close()
