"""The site's build hook (mkdocs.yml's `hooks:`): the reference pages generated as the site is
built, never committed, by the functions `ns_control docs` uses too
(controller/cli/reference.py and manual.py); and the nav held to the pages `ns_control docs`
lists. A page that cannot be made (a key or an argument without a description, no headline
figures) fails the build, naming why. For docs/api.md's reference, mkdocstrings reads
netspec's packages laid out as installed (build/api/netspec/: links into the checkout, which
holds them as top-level folders)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
from netspec.controller.cli.main import parser
from netspec.controller.cli.manual import GENERATED, PAGES
from netspec.protocol.errors import NetspecError


def _nav_pages(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [p for item in nav for p in _nav_pages(item)]
    if isinstance(nav, dict):
        return [p for value in nav.values() for p in _nav_pages(value)]
    return []


def _installed_layout(root: Path) -> Path:
    """build/api/netspec/ as site-packages would hold it, so that mkdocstrings finds
    netspec.nodelib and what netspec.results takes from netspec.protocol: each subpackage a
    link to the folder pyproject.toml's package-dir maps it from, netspec's own modules copies
    (griffe looks for a package's submodules beside the file its __init__ links to)."""
    dirs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    layout = root / "build" / "api"
    package = layout / "netspec"
    package.mkdir(parents=True, exist_ok=True)
    for module in (root / dirs["netspec"]).glob("*.py"):
        copy = package / module.name
        if not copy.is_file() or copy.read_bytes() != module.read_bytes():
            copy.write_bytes(module.read_bytes())
    links = {package / name.split(".", 1)[1]: root / folder
             for name, folder in dirs.items() if name.startswith("netspec.")}
    for link, target in links.items():
        if not link.is_symlink() or link.readlink() != target:
            link.unlink(missing_ok=True)
            link.symlink_to(target)
    return layout


# Made as mkdocs.yml's hooks are loaded: mkdocstrings takes its paths before any on_config.
_installed_layout(Path(__file__).resolve().parents[1])


def on_config(config: Any) -> Any:
    nav = _nav_pages(config["nav"])
    if nav != list(PAGES):
        raise PluginError(f"mkdocs.yml's nav and `ns_control docs`'s pages (NAV in "
                          f"controller/cli/manual.py) differ: only in the nav: "
                          f"{sorted(set(nav) - set(PAGES)) or 'none'}; only in NAV: "
                          f"{sorted(set(PAGES) - set(nav)) or 'none'}; or in another order")
    return config


def on_files(files: Files, config: Any) -> Files:
    commands = parser()
    for page, (_, make) in GENERATED.items():
        try:
            text = make(commands)
        except NetspecError as exc:
            raise PluginError(f"{page}: {exc}") from exc
        files.append(File.generated(config, page, content=text))
    return files
