"""Every bench script runs from a fresh clone (issue 49): each, with its smallest settings,
exits 0 and ends its output with one JSON object. Its figures are not judged here (they are
the bench's to take, with the machine to itself: bench/RESULTS.md); that it runs is."""

import ast
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nethosts
import pytest
from browser import CHROMEDRIVER, CHROMIUM
from support import REPO

BENCH = REPO / "bench"
pytestmark = pytest.mark.benches  # make test-benches, not make test


def root() -> str | None:
    return None if os.geteuid() == 0 else "needs root"


def namespaced_hosts() -> str | None:
    return nethosts.why_unavailable()


def docker_engine() -> str | None:
    # Only where Docker's engine is not installed: one installed that does not answer fails
    # the bench, and so this test (start dockerd: .ci/run does).
    return None if shutil.which("dockerd") else "needs Docker's engine (dockerd is not installed)"


def kubernetes_parts() -> str | None:
    # As the Kubernetes tests: only where Go or containerd cannot be had.
    absent = [name for name in ("go", "containerd") if shutil.which(name) is None]
    return f"needs {', '.join(absent)} (the Kubernetes testbed)" if absent else None


def chromium() -> str | None:
    return None if Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists() else \
        f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER})"


def programs(*names: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        absent = [name for name in names if shutil.which(name) is None]
        return f"needs {', '.join(absent)} (apt-get install stress-ng chrony)" if absent else None
    return missing


# Each bench's smallest settings, and what the machine must have for it. bench/links.py is
# called with the flags it has (another part of issue 49 changes it).
SMALLEST: dict[str, tuple[list[str], list[Callable[[], str | None]]]] = {
    "barrier.py": (["--daemons", "1", "--steps", "5"], []),
    "browser.py": (["--hosts", "5", "--repeat", "1"], [chromium]),  # a fifth of the hosts a group
    "camp.py": (["--seconds", "0.5"], []),
    "clksync.py": (["--seconds", "1"], [root, programs("stress-ng", "chronyd")]),
    "containers.py": (["--counts", "1", "--steps", "2", "--deadline", "120"], [docker_engine]),
    "events.py": (["--calls", "1000", "--repeat", "1"], []),
    "faults.py": (["--trials", "1", "--kinds", "component"], [root]),
    "faulttiming.py": (["--runs", "1", "--rounds", "1"], [root, namespaced_hosts]),
    "fleet1000.py": (["--hosts", "2", "--timeout", "300"], []),
    "fleet.py": (["--hosts", "2", "--steps", "5", "--fan-out", "2"], [namespaced_hosts]),
    "fuzz.py": (["--seconds", "4", "--frames", "10", "--actions", "10", "--inputs", "10", "--idle", "2",
                 "--half-open", "2", "--controllers", "2", "--engine", "random"], []),
    "links.py": (["--seconds", "0.2", "--only", "delay"], [root, namespaced_hosts]),
    "load.py": (["--seconds", "0.2", "--calls", "1000", "--repeat", "1", "--hosts", "10", "--values", "100"],
                []),
    "merge.py": (["--events", "1000"], []),
    "pods.py": (["--counts", "1", "--steps", "2", "--deadline", "120"],
                [root, docker_engine, kubernetes_parts]),
    "packets.py": (["--rates", "500", "--seconds", "0.5", "--delay-ms", "2"], [root, namespaced_hosts]),
    "nodestart.py": (["--repeat", "1"], []),
    "nodestep.py": (["--steps", "10"], []),
    "probecost.py": (["--exchanges", "10"], []),
    "record.py": (["--hosts", "2", "--steps", "2", "--repeat", "1"], []),
    "sampling.py": (["--seconds", "0.5"], []),
    "scale.py": (["--daemons", "2", "--steps", "2", "--component-max", "2", "--fan-out", "flat"], []),
    "stepcost.py": (["--hosts", "10", "--width", "4", "--steps", "2"], []),
    "stepfloor.py": (["--processes", "2", "--steps", "5"], []),
    "wakefloor.py": (["--processes", "2", "--instants", "2"], []),
}


def scripts() -> set[str]:
    """bench/'s scripts: its Python files with a `__main__` block (ticker.py, the benches'
    component, has none)."""
    found = set()
    for path in BENCH.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
                found.add(path.name)
    return found


def test_every_bench_script_has_its_smallest_settings_here():
    assert scripts() == set(SMALLEST)


@pytest.mark.parametrize("script", sorted(SMALLEST))
def test_a_bench_script_with_its_smallest_settings_exits_0_and_ends_with_one_json_object(script, tmp_path):
    argv, needs = SMALLEST[script]
    missing = [reason for need in needs if (reason := need())]
    if missing:
        pytest.skip(f"bench/{script} {'; '.join(missing)}")
    # From a directory of its own, as from a fresh clone: nothing of an earlier run at hand
    # (NETSPEC_HOME is the test's, conftest.py).
    done = subprocess.run([sys.executable, str(BENCH / script), *argv], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"bench/{script} exited {done.returncode}:\n{done.stderr[-3000:]}"
    lines = done.stdout.strip().splitlines()
    assert lines, f"bench/{script} printed nothing"
    assert isinstance(json.loads(lines[-1]), dict), lines[-1]
