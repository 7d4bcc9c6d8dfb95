"""What netspec made in this machine's Docker engine, found again by its labels: a run's
containers and network removed by label, a kept one left; a dead controller's runs told from
a live one's and from another machine's. Everything made is named for the session and
removed after."""

import subprocess

import pytest
from netspec.controller.hosts.engines import CREATED_LABEL
from netspec.controller.hosts.leftovers import (
    BOOT_ID,
    CONTROLLER_LABEL,
    KEPT_LABEL,
    RUN_LABEL,
    controller_gone,
    controller_id,
    dead_runs,
    remove_run,
)
from support import remove_named, session_dir, session_run_id

docker = pytest.importorskip("docker")


@pytest.fixture
def made(docker_image):
    """A maker of labelled containers of the session's, every one removed after."""
    client = docker.from_env()
    prefix = f"{session_dir().name}-left"

    def make(name: str, labels: dict[str, str], network=None):
        return client.containers.create(docker_image, ["sleep", "1"], name=f"{prefix}-{name}", labels=labels,
                                        network=network.name if network else None)
    yield client, prefix, make
    remove_named(client, prefix)
    client.close()


def test_a_runs_containers_and_network_are_removed_by_label_and_a_kept_one_is_left(made):
    client, prefix, make = made
    run = session_run_id("r-left")
    labels = {RUN_LABEL: run, CREATED_LABEL: "1"}
    network = client.networks.create(f"{prefix}-net", labels=labels)
    make("a", labels, network)
    make("kept", {**labels, KEPT_LABEL: "1"})
    make("other", {RUN_LABEL: session_run_id("r-else"), CREATED_LABEL: "1"})
    removed = remove_run(client, run)
    assert removed == [f"container {prefix}-a", f"network {prefix}-net"]
    left = sorted(c.name for c in client.containers.list(all=True, filters={"name": prefix}))
    assert left == [f"{prefix}-kept", f"{prefix}-other"]


def test_a_run_whose_controller_is_gone_is_told_from_a_live_ones_and_another_machines(made):
    client, _, make = made
    gone, live, elsewhere = (session_run_id(f"r-{n}") for n in ("gone", "live", "elsewhere"))
    proc = subprocess.Popen(["sleep", "300"])
    label = controller_id(proc.pid)
    proc.kill()
    proc.wait()
    assert controller_gone(label)
    assert not controller_gone(controller_id(1))
    other_boot = f"{'0' * 8}-0000-0000-0000-{'0' * 12}:{proc.pid}:1"
    assert BOOT_ID.read_text().strip() != other_boot.split(":")[0] and not controller_gone(other_boot)
    make("gone", {RUN_LABEL: gone, CREATED_LABEL: "1", CONTROLLER_LABEL: label})
    make("gone-kept", {RUN_LABEL: gone, CREATED_LABEL: "1", CONTROLLER_LABEL: label, KEPT_LABEL: "1"})
    make("live", {RUN_LABEL: live, CREATED_LABEL: "1", CONTROLLER_LABEL: controller_id(1)})
    make("elsewhere", {RUN_LABEL: elsewhere, CREATED_LABEL: "1", CONTROLLER_LABEL: other_boot})
    found = {run: names for run, names in dead_runs(client, "").items() if run in (gone, live, elsewhere)}
    assert found == {gone: [f"{session_dir().name}-left-gone"]}
