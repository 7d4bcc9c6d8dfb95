"""The site's build hook (mkdocs.yml's `hooks:`): the reference pages generated as the site is
built, never committed, by the functions `ns_control docs` uses too
(controller/cli/reference.py and manual.py); and the nav held to the pages `ns_control docs`
lists. A page that cannot be made (a key or an argument without a description, no headline
figures) fails the build, naming why."""

from __future__ import annotations

from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files
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


def on_config(config: Any) -> Any:
    nav = _nav_pages(config["nav"])
    if nav != list(PAGES):
        raise PluginError(f"mkdocs.yml's nav and `ns_control docs`'s pages (NAV in "
                          f"controller/cli/manual.py) differ: only in the nav: "
                          f"{sorted(set(nav) - set(PAGES)) or 'none'}; only in NAV: "
                          f"{sorted(set(PAGES) - set(nav)) or 'none'}; or in another order")
    return config


def on_files(files: Files, config: Any) -> Files:
    for page, (_, make) in GENERATED.items():
        try:
            text = make()
        except NetspecError as exc:
            raise PluginError(f"{page}: {exc}") from exc
        files.append(File.generated(config, page, content=text))
    return files
