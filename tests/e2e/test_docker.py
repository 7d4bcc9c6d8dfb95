"""docker: hosts on this machine's engine: containers made for the run on its own network,
one attached by label, placement recorded, a container killed mid-run salvaged through
the engine, the containers' clocks and CAMP figures checked against what is true of them.
Everything the test makes is named for the session and removed after."""

import io
import json
import tarfile
import textwrap

import duckdb
import pytest
from netspec.analysis.provenance import shared_kernels
from netspec.datastream.reader import StreamReader
from support import latest_record, session_dir, start_run, wait_for

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
    try:
        path = experiment(textwrap.dedent(TEXT.format(image=docker_image, prefix=prefix)))
        in_work = lambda r: (r.get("steps") or [{}])[-1].get("phase") == "work"  # noqa: E731
        proc, record = start_run(path, tmp_path, in_work, "the run to reach phase 'work'")
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
        assert a["limits"] == {"cpus": 0.5, "memory_bytes": 256 * MIB, "cap_add": ["NET_ADMIN"]}
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
        db = duckdb.connect()
        said = db.execute(f"SELECT data FROM '{run}/merged/events.parquet' WHERE host = 'a' "
                          "AND entity = 'CAMP/warning'").fetchall()
        assert any('"kind": "cgroup"' in d or '"kind":"cgroup"' in d for (d,) in said), said
        (most,) = db.execute(f"SELECT max(value) FROM '{run}/merged/samples.parquet' WHERE host = 'a' "
                             "AND entity = 'CAMP/node' AND field = 'mem_free'").fetchone()
        assert 0 < most <= 256 * MIB

        # Nothing of the run is left in the engine: its containers and network are gone, the
        # attached container left the network and runs on.
        assert [x.name for x in client.containers.list(all=True, filters={"name": prefix})] == [attached.name]
        assert client.networks.list(names=[f"{prefix}-{record['id']}"]) == []
        attached.reload()
        assert attached.status == "running"
        assert list(attached.attrs["NetworkSettings"]["Networks"]) == ["bridge"]
    finally:
        attached.remove(force=True)
        for network in client.networks.list(filters={"name": prefix}):
            network.remove()
        client.close()
