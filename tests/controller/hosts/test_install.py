"""netspec installed as a tool, from its wheel: the demo runs from the installed package."""

import os
import subprocess
import sys
import sysconfig
import tomllib
import venv

from netspec.controller.hosts.wheels import build_id, local_wheels
from support import REPO, load_record


def test_a_wheel_install_runs_the_demo_from_its_installed_package(tmp_path):
    # netspec's wheel in a venv of its own, as `pip install .` or pipx would put it: nothing
    # of the checkout on its path. Its dependencies are this environment's, reached through
    # a .pth (a directory a .pth names has its own .pth files left unread, so this
    # environment's editable netspec stays out), rather than installed again for a minute.
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    wheel = next(w for w in local_wheels(build_id()) if w.name.startswith("netspec-"))
    # This environment's pip installs into that venv (pip's --python), which needs none.
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", "--disable-pip-version-check", str(wheel)], check=True)
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (env_dir / site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = "import netspec.experiments as e; print(e.__file__)"
    # From tmp_path: a checkout's own netspec/ folder, in the current directory, would come first.
    where = subprocess.run([python, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                           check=True).stdout
    assert where.startswith(str(env_dir)), where
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([env_dir / "bin" / "ns_control", "demo"], cwd=tmp_path, capture_output=True,
                          text=True, env={**env, "NETSPEC_HOME": str(tmp_path / "home")}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "b/client: 2000 round trips: median" in done.stdout
    record = load_record(tmp_path / "runs" / "latest")
    assert record["status"] == "ok" and record["plan"]["source"].startswith(str(env_dir))


def test_every_folder_python_could_import_is_a_listed_package_so_a_build_warns_of_none():
    # setuptools warns ("Package 'netspec.web.static' is absent from the `packages`
    # configuration", 40 lines each) of a folder inside a package whose name Python could
    # import, data alone or not, unless pyproject lists it: `make setup` printed 160 lines.
    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, dirs = set(setup["packages"]), setup["package-dir"]
    unlisted = []
    for package in listed:
        top = max((p for p in dirs if package == p or package.startswith(p + ".")), key=len)
        folder = REPO / dirs[top] / package.removeprefix(top).lstrip(".").replace(".", "/")
        for sub in folder.iterdir():
            if sub.is_dir() and sub.name.isidentifier() and sub.name != "__pycache__" \
                    and f"{package}.{sub.name}" not in listed:
                unlisted.append(f"{package}.{sub.name}")
    assert unlisted == []
