"""End to end: the bundled etcd experiment (experiments/etcd) on real Docker containers of
netspec's image with Debian's etcd-server in it (`ns_control image build --package`): the
leader, as its member claims the role, isolated from every other host by one fault aimed at
the role; a member killed and started again; the client's writes recover from each. Checked
against what etcd itself said: each member's ETCD/leader events (its own status, polled)."""

import os
import shutil
from unittest import mock

import duckdb
import pytest
from netspec.protocol.runrecord import read_run
from support import REPO, ns_control, session_dir

pytestmark = pytest.mark.e2e

EXPERIMENT = REPO / "experiments" / "etcd"
LATE_AT_MOST_NS = 100_000_000  # a loaded 2-core machine running four containers and etcd


@pytest.fixture(scope="module")
def etcd_image(docker_image: str) -> str:
    """netspec's image with etcd-server in it, made of this machine's installed packages."""
    if shutil.which("etcd") is None:
        pytest.skip("Debian's etcd-server is not installed here (apt-get install etcd-server): the "
                    "image is made of this machine's packages")
    from netspec.controller.hosts.engines import engine_client
    from netspec.controller.hosts.images import build

    client = engine_client(None)
    try:
        # the session's wheels, as docker_image's
        with mock.patch.dict(os.environ, {"NETSPEC_CACHE": str(session_dir() / "cache")}):
            return build(client, print, packages=("etcd-server",))
    finally:
        client.close()


def test_the_etcd_experiment_partitions_its_leader_by_role_and_recovers(etcd_image, tmp_path):
    prefix = f"{session_dir().name}-etcd"
    text = (EXPERIMENT / "etcd.yaml").read_text().replace(
        "{docker: {packages: [etcd-server]}}", f"{{docker: {{packages: [etcd-server], prefix: {prefix}}}}}")
    for name in ("member.py", "client.py"):
        shutil.copy(EXPERIMENT / name, tmp_path / name)
    (tmp_path / "etcd.yaml").write_text(text)
    done = ns_control("run", "etcd.yaml", cwd=tmp_path, timeout=300)
    run = tmp_path / "runs" / "latest"
    record = read_run(run)
    assert done.returncode == 0 and record.status == "ok", done.stdout + done.stderr
    partition, kill, start = record.faults
    # the partition took the member leading at its instant, as etcd said it: the last
    # ETCD/leader gain before the instant is the holder's, and its claim's
    merged = run / "merged"
    leaders = duckdb.sql(f"SELECT ts, component, tag FROM '{merged / 'events.parquet'}' "
                         "WHERE entity = 'ETCD/leader' ORDER BY ts").fetchall()
    gained = [(ts, who) for ts, who, tag in leaders if tag == 1 and ts <= partition.planned_ns]
    assert gained and partition.holder == gained[-1][1] and partition.role == "leader", (partition, leaders)
    assert abs(partition.claimed_ns - gained[-1][0]) < 5_000_000, (partition, gained)
    assert len(partition.parts) == 6 and not partition.error, partition  # its host <-> each of 3 others
    assert all(p.done_ns is not None and p.ended_ns is not None for p in partition.parts), partition
    assert partition.late_ns < LATE_AT_MOST_NS, partition
    # a new leader among the others, elected during the partition
    after = [who for ts, who, tag in leaders if tag == 1 and partition.done_ns < ts < partition.ended_ns]
    assert after and partition.holder not in after, leaders
    assert "killed by SIGKILL" in kill.effect and "started again" in start.effect, (kill, start)
    assert record.components["n3/etcd3"].returncode == 0  # its second life, stopped at the end
    # recovery, from the client's writes: after the partition and after its end
    rows = duckdb.sql(f"SELECT index, recovery_ns, recovery_after_end_ns, holder, directions FROM "
                      f"'{merged / 'faults.parquet'}' ORDER BY index").fetchall()
    assert rows[0][1] is not None and rows[0][2] is not None and rows[0][3] == partition.holder, rows
    assert rows[0][4] == 6, rows
    failed = duckdb.sql(f"SELECT count(*) FROM '{merged / 'operations.parquet'}' "
                        "WHERE outcome <> 'ok'").fetchall()[0]
    assert failed[0] >= 1, "the partition failed no write"
    report = ns_control("report", str(run), cwd=tmp_path)
    assert "recovery (each fault against the first success" in report.stdout, report.stdout
