"""Wheels of this build of netspec and of what its daemon needs, to install on remote hosts.

A remote host runs netspecd and the components (nodelib), never the controller or the
merge, so it gets netspec's wheel without its dependencies and the daemon's few
(DAEMON_DEPENDENCIES, at the controller's own versions): about 1 MB to copy and seconds to
install, where numpy, pyarrow, duckdb, scipy and the rest were 220 MB and most of a minute.
A build is named by a digest of netspec's source, so a host running another build is
reinstalled. The wheels are built once per build from a copy of the source (building in
the checkout would leave build/ and *.egg-info there) and cached in $NETSPEC_CACHE or
~/.cache/netspec.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from netspec.protocol.errors import NetspecError

# What netspecd, clksync's probes and gate, CAMP and nodelib import; the daemon's modules
# import nothing else (tests/daemon/test_main.py holds them to it).
DAEMON_DEPENDENCIES = ("msgpack", "msgspec", "psutil")
PACKAGES = ("netspec", "protocol", "datastream", "controller", "daemon", "nodelib", "camp", "clksync",
            "links", "analysis", "web", "experiments", "docs")


def source_root() -> Path:
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        raise NetspecError(f"netspec is not run from a source checkout ({root}); cannot build the "
                           "wheel to install on remote hosts: install netspec there yourself")
    return root


@functools.cache
def build_id() -> str:
    """A digest of this netspec's source: a remote install of another build is replaced.
    Computed once per process: every SSH host asks for it."""
    root, digest = source_root(), hashlib.sha256()
    for path in sorted([root / "pyproject.toml", *(p for pkg in PACKAGES for p in (root / pkg).rglob("*")
                                                    if p.is_file() and "__pycache__" not in p.parts)]):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


_building = threading.Lock()


def local_wheels(build: str) -> list[Path]:
    """Wheels of this build of netspec and of its daemon's dependencies, built once and cached
    (one builder at a time, threads and controllers alike)."""
    cache = Path(os.environ.get("NETSPEC_CACHE", Path("~/.cache/netspec").expanduser())) / "wheels" / build
    cache.mkdir(parents=True, exist_ok=True)
    with _building, open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cache / ".complete").exists():
            _build_wheels(cache)
            (cache / ".complete").touch()
    return sorted(cache.glob("*.whl"))


def _build_wheels(into: Path) -> None:
    root = source_root()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "src"
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        src.mkdir()
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(root / name, src / name)
        for pkg in PACKAGES:
            shutil.copytree(root / pkg, src / pkg, ignore=ignore)
        pins = [f"{name}=={importlib.metadata.version(name)}" for name in DAEMON_DEPENDENCIES]
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                                "--disable-pip-version-check", "-w", str(into), str(src), *pins],
                               capture_output=True, text=True)
    if built.returncode:
        raise NetspecError(f"cannot build the wheels to install on remote hosts:\n{built.stderr[-2000:]}")
