"""Placement shown, for real: a campaign file sweeping a docker group's CPU limit, each of
its two points run as it would be (the point's file), on a container each; the limit
reaches the containers, and `show`, the run page, the bundle and the comparison of the two
runs say where each host ran. Everything the test makes is named for the session and
removed after."""

import json
import tarfile
from pathlib import Path

import pytest
from netspec.analysis.provenance import differences, load
from netspec.controller.experiment.campaignfile import point_text
from netspec.controller.experiment.load import load as load_file
from netspec.protocol.runrecord import read_run
from netspec.web.pages import render, run_header
from support import ns_control, session_dir

docker = pytest.importorskip("docker")
pytestmark = pytest.mark.e2e

TEXT = """\
experiment: placed
hosts:
  peers: {{count: 1, docker: {{image: "{image}", prefix: {prefix}, cpus: 0.5}}}}
components:
  c: {{group: peers, command: "true"}}
schedule: [launch, collect]
sweep:
  params:
    hosts.peers.docker.cpus: [0.5, 1]
"""


def test_a_swept_cpu_limit_reaches_the_containers_and_every_view_says_where_each_host_ran(
        docker_image, experiment, tmp_path):
    client = docker.from_env()
    prefix = f"{session_dir().name}-p"
    try:
        campaign = load_file(experiment(TEXT.format(image=docker_image, prefix=prefix), "campaign.yaml"))
        runs = []
        for i, point in enumerate(campaign.campaign.points):
            path = experiment(point_text(campaign.text, point), f"point{i}.yaml")
            done = ns_control("run", "--no-merge", str(path), cwd=tmp_path, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
            runs.append(max((tmp_path / "runs" / "placed").iterdir(), key=lambda p: p.stat().st_mtime))
        first, second = (read_run(run) for run in runs)
        assert {h.placement.limits.cpus for h in first.hosts.values()} == {0.5}
        assert {h.placement.limits.cpus for h in second.hosts.values()} == {1.0}
        container = first.hosts["peers-1"].placement.container_id[:12]

        shown = ns_control("show", str(runs[0].name), cwd=tmp_path).stdout
        assert "  placement:" in shown and f"container {container} " in shown, shown
        assert "peers-1: docker engine local, node " in shown and "cpus 0.5, memory unlimited" in shown

        said = differences(load(runs[0]), load(runs[1]))
        moved = [line for line in said if " placement: " in line]
        assert [line.split(" placement:")[0] for line in moved] == ["host peers-1"]
        assert "cpus 0.5" in moved[0].split(" -> ")[0] and "cpus 1," in moved[0].split(" -> ")[1]

        page = render("run.html", **run_header(runs[0], first, first.id, []))
        start = page.index('id="placement-section"')
        block = page[start:page.index("</section>", start)]
        assert "<td>peers-1</td>" in block and f"container {container}" in block and "cpus 0.5" in block

        bundle = tmp_path / "placed.tar.gz"
        assert ns_control("export", runs[0].name, "--to", str(bundle), cwd=tmp_path).returncode == 0
        with tarfile.open(bundle) as tar:
            meta = next(m for m in tar.getmembers() if m.name.endswith("ro-crate-metadata.json"))
            crate = json.loads(tar.extractfile(meta).read())
        hosts = {e["name"]: e for e in crate["@graph"] if e.get("name", "").startswith("host ")}
        placement = first.hosts["peers-1"].placement
        assert hosts["host peers-1"]["placement"]["container_id"] == placement.container_id
        elsewhere = tmp_path / "elsewhere"
        imported = ns_control("import", str(bundle), "--runs", str(elsewhere), cwd=tmp_path)
        assert imported.returncode == 0, imported.stderr
        back = read_run(next(Path(elsewhere).rglob("run.json")).parent)
        assert back.hosts["peers-1"].placement == placement
        assert [x.name for x in client.containers.list(all=True, filters={"name": prefix})] == []
    finally:
        for left in client.containers.list(all=True, filters={"name": prefix}):
            left.remove(force=True)
        for network in client.networks.list(filters={"name": prefix}):
            network.remove()
