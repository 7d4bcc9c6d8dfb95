"""netspec installed as a tool, from its wheel: the demo runs from the installed package."""

import os
import subprocess

from conftest import session_dir
from netspec.protocol.runrecord import load_record


def test_a_wheel_install_runs_the_demo_from_its_installed_package(nethosts, tmp_path):
    # The namespaced hosts' home holds a venv with netspec installed from its wheels, as
    # `pip install .` or pipx would: nothing of the checkout on its path.
    venv = session_dir() / "home" / ".local" / "share" / "netspec" / "venv"
    probe = "import netspec.experiments as e; print(e.__file__)"
    where = subprocess.run([venv / "bin" / "python", "-c", probe],
                           capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(venv)), where
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([venv / "bin" / "ns_control", "demo"], cwd=tmp_path, capture_output=True, text=True,
                          env={**env, "NETSPEC_HOME": str(tmp_path / "home")}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "b/client: 2000 round trips: median" in done.stdout
    record = load_record(tmp_path / "runs" / "latest")
    assert record["status"] == "ok" and record["plan"]["source"].startswith(str(venv))
