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

import pytest
from netspec.analysis.provenance import shared_kernels
from netspec.datastream.reader import StreamReader
from support import latest_record, ns_control, session_dir, start_run, wait_for

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


def remove_named(client, prefix: str) -> None:
    """Every container and network whose name has `prefix`, removed (a test's leftovers)."""
    for container in client.containers.list(all=True, filters={"name": prefix}):
        container.remove(force=True)
    for network in client.networks.list(filters={"name": prefix}):
        network.remove()


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
    attached = client.containers.run(docker_image, ["sleep", "infinity"], name=f"{prefix}-attached",
                                     labels={"org.netspec.test": prefix}, detach=True, init=True)
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
        facts = {h: json.loads((run / "hosts" / h / "facts.json").read_text()) for h in "abc"}
        assert shared_kernels(facts) == [["a", "b", "c"]]

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
