"""clksync in real runs: hosts in network namespaces over veth and a bridge share this
machine's clock, so the true offset is exactly 0 and every estimate is pure error."""

import numpy as np
import pytest
from clockwarp import warp
from netspec.clksync.fit import Exchanges, fit
from netspec.clksync.records import fit_run, read_host
from netspec.protocol.runrecord import read_run
from support import latest_record, ns_control

pytestmark = pytest.mark.e2e

CLOCKS = """\
experiment: clocks
hosts: {HOSTS}
components:
  wait: {{host: b, command: "sleep {SECONDS}", start: run}}
services:
  clksync: {{reference: a, {CLKSYNC}}}
schedule:
  - launch
  - {{phase: sync_clocks, deadline: {DEADLINE}}}
  - run
  - collect
"""
OVER_SSH = "{a: {ssh: netspec-h1}, b: {ssh: netspec-h2}}"
LOCAL = "{a: {}, b: {}}"


def run_clocks(experiment, cwd, hosts=LOCAL, seconds=6, clksync="until_bound_us: 50", deadline="20s"):
    text = CLOCKS.format(HOSTS=hosts, SECONDS=seconds, CLKSYNC=clksync, DEADLINE=deadline)
    # The clock tests read the streams themselves: the run's merge is not needed.
    return ns_control("run", str(experiment(text)), "--no-merge", cwd=cwd, timeout=120)


def grid(ex: Exchanges, n=5000) -> np.ndarray:
    return np.linspace(ex.t1[0], ex.t4[-1], n).astype(np.int64)


def check_truth_zero(run, source):
    fits = fit_run(run, read_run(run))
    assert fits["a"].source == "reference" and fits["b"].source == source
    ex = Exchanges.from_rows(read_host(sorted((run / "hosts" / "b").glob("streams/clksync.*.ds"))).exchanges)
    offset, lo, hi = fits["b"].offsets(grid(ex))
    assert np.all((lo <= 0) & (hi >= 0)), "the bound must hold the true offset, 0"
    return ex, offset


@pytest.mark.timing
def test_hosts_over_veth_agree_with_the_truth_within_the_bound(ssh_env, experiment, tmp_path):
    done = run_clocks(experiment, tmp_path, OVER_SSH, seconds=5)
    assert done.returncode == 0, done.stdout + done.stderr
    run = (tmp_path / "runs" / "latest").resolve()
    record = latest_record(tmp_path / "runs")
    assert record["hosts"]["b"]["clock"]["bound_ns"] <= 50_000
    assert record["hosts"]["b"]["clock"]["source"] == "kernel"
    ex, offset = check_truth_zero(run, "kernel")
    assert len(ex) > 5 * 10 and ex.kernel.all()
    assert np.percentile(np.abs(offset), 99) < 20_000
    # The same exchanges seen through a warped clock on b: offset, drift and wander.
    theta = warp(offset_ns=-3_000_000_000, drift_ppm=50.0, wander_ppm=0.5, period_s=4.0)
    warped = Exchanges(ex.t1 + theta(ex.t1), ex.t2, ex.t3, ex.t4 + theta(ex.t4), ex.kernel)
    true = grid(ex)
    converted, bound = fit("b", "a", warped).to_global(true + theta(true))
    err = converted - true
    assert np.all(np.abs(err) <= bound)
    assert np.percentile(np.abs(err), 99) < 20_000


def test_user_space_timestamps_when_asked_are_marked_and_still_bound_the_truth(experiment, tmp_path):
    done = run_clocks(experiment, tmp_path, clksync="timestamps: user", seconds=3)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "user timestamps" in done.stdout
    ex, _ = check_truth_zero((tmp_path / "runs" / "latest").resolve(), "user")
    assert not ex.kernel.any()


def test_sync_clocks_fails_at_its_deadline_naming_each_host_and_its_bound(experiment, tmp_path):
    done = run_clocks(experiment, tmp_path, clksync="until_bound_us: 0.001", deadline="2s")
    assert done.returncode == 1
    assert "phase 'sync_clocks' failed on b" in done.stderr
    assert "clock bound" in done.stderr and "above the 0.001 us asked for" in done.stderr
    record = latest_record(tmp_path / "runs")
    assert record["status"] == "failed" and record["error"]["phase"] == "sync_clocks"
    assert any((tmp_path / "runs" / "latest" / "hosts" / "b" / "streams").glob("clksync.*.ds"))


def test_a_run_of_one_host_passes_sync_clocks_as_its_own_reference(experiment, tmp_path):
    text = CLOCKS.format(HOSTS="{b: {}}", SECONDS=0.1, CLKSYNC="until_bound_us: 1", DEADLINE="5s")
    done = ns_control("run", str(experiment(text.replace("reference: a, ", ""))), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert latest_record(tmp_path / "runs")["hosts"]["b"]["clock"]["source"] == "reference"
