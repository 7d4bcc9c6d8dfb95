"""Check the import-linter contracts of pyproject.toml (netspec's layers) on this checkout.

The repository's top-level folders are netspec's subpackages only once installed; grimp,
which import-linter uses, reads packages from disk, so they are laid out here as a
`netspec` folder of links to them and to netspec/'s own modules, first on the path.

    python tools/lint_imports.py        # exit 0 when every contract is kept
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = config["tool"]["setuptools"]["package-dir"]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "netspec").mkdir()
        for name, folder in packages.items():
            target = Path(tmp) / name.replace(".", "/")
            if name == "netspec":  # the package's own modules (netspec/), beside its subpackages' links
                for module in (ROOT / folder).glob("*.py"):
                    (target / module.name).symlink_to(module)
            else:
                target.symlink_to(ROOT / folder)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tmp, os.environ.get("PYTHONPATH", "")])}
        lint = Path(sys.executable).with_name("lint-imports")
        return subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], env=env,
                              cwd=tmp).returncode


if __name__ == "__main__":
    sys.exit(main())
