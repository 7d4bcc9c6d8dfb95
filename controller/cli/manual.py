"""`ns_control docs`: the manual as installed. Its pages (docs/*.md in the repository) ship
as package data (`netspec.manual`); `ns_control docs` lists them in the site's order and
`ns_control docs PAGE` prints one, the reference pages generated on the spot by
reference.py, as the site's build makes them (tools/docs_hook.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netspec.protocol.errors import NetspecError
from netspec.protocol.runoutcome import EXIT_OK, EXIT_USAGE

# The site's layout: mkdocs.yml's nav says the same (the site's build checks it: docs_hook.py).
NAV: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Home", ("index.md",)),
    ("Tutorials", tuple(f"tutorials/{p}.md" for p in (
        "first-experiment", "ssh-hosts", "docker-hosts", "kubernetes-hosts", "links-and-faults",
        "campaign"))),
    ("How-to guides", tuple(f"how-to/{p}.md" for p in (
        "instrument", "pair-events", "operations", "packets", "sweep-until-stable", "salvage-and-collect",
        "export-import", "read-results", "fleets", "browse", "ready-experiments", "develop"))),
    ("Reference", ("reference/experiment-file.md", "reference/commands.md", "results.md", "api.md",
                   "reference/exit-codes.md", "stream-format.md", "protocol.md", "reference/benchmarks.md")),
    ("Explanations", (*(f"explanations/{p}.md" for p in (
        "phases", "timeline", "sampling", "links-audit", "open-loop", "histograms", "security")),
        "architecture.md")),
)
PAGES = tuple(page for _, pages in NAV for page in pages)

EPILOG = ("The manual: `ns_control docs` lists its pages, `ns_control docs PAGE` prints one "
          "(e.g. `ns_control docs commands`, every command and flag).")


def epilog(*pages: str) -> str:
    """A command's --help epilogue naming the manual's pages about it."""
    return "The manual: " + ", ".join(f"`ns_control docs {p}`" for p in pages) + "."


def _schema_page(parser: argparse.ArgumentParser) -> str:
    from ..experiment.schemacheck import schema
    from .reference import experiment_file
    return experiment_file(schema())


def _commands_page(parser: argparse.ArgumentParser) -> str:
    from .reference import commands
    return commands(parser)


def _exit_codes_page(parser: argparse.ArgumentParser) -> str:
    from .reference import exit_codes
    return exit_codes()


def _benchmarks_page(parser: argparse.ArgumentParser) -> str:
    from .reference import benchmarks
    results = Path(__file__).resolve().parents[2] / "bench" / "RESULTS.md"
    if not results.is_file():
        return ("# Benchmarks\n\nnetspec's headline figures are the table at the top of "
                "bench/RESULTS.md in its source repository, which an installed netspec does not "
                "hold; the site built from a checkout (`make docs`) has them as this page.\n")
    return benchmarks(results.read_text())


# The pages made at build time, each by its function of ns_control's parser (the commands
# page is made of it; the site's hook calls the same, with main.parser()'s).
GENERATED: dict[str, tuple[str, Callable[[argparse.ArgumentParser], str]]] = {
    "reference/experiment-file.md": ("The experiment file", _schema_page),
    "reference/commands.md": ("Commands", _commands_page),
    "reference/exit-codes.md": ("Exit codes", _exit_codes_page),
    "reference/benchmarks.md": ("Benchmarks", _benchmarks_page),
}


def pages_dir() -> Path:
    """Where the manual's pages are: netspec/manual/ where netspec is installed from a wheel
    (pip, pipx), docs/ in a checkout (an editable install maps netspec.manual there, but a
    folder without code cannot be imported through its mapping)."""
    package = Path(__file__).resolve().parents[2]
    for where in (package / "manual", package / "docs"):
        if (where / "index.md").is_file():
            return where
    raise NetspecError(f"the manual's pages are not installed with this netspec ({package}/manual)")


def find_page(name: str) -> str:
    """A page by its path (`reference/commands.md`), without `.md`, or by its last part
    alone where that is one page's (`commands`).

    Raises:
        NetspecError: no page, or several, go by that name (the pages are listed).
    """
    wanted = name.removesuffix(".md")
    matches = [p for p in PAGES if p.removesuffix(".md") == wanted] or \
              [p for p in PAGES if p.removesuffix(".md").rsplit("/", 1)[-1] == wanted]
    if len(matches) == 1:
        return matches[0]
    said = f"'{name}' names {len(matches)} pages" if matches else f"no page '{name}'"
    listed = ", ".join(p[:-3] for p in matches or PAGES)
    raise NetspecError(f"{said}: `ns_control docs` lists them ({listed})")


def page_text(page: str, parser: argparse.ArgumentParser) -> str:
    """A page's Markdown: a generated page made now (of ns_control's `parser`), another read
    from the installed manual."""
    if page in GENERATED:
        return GENERATED[page][1](parser)
    return pages_dir().joinpath(page).read_text()


def title(page: str) -> str:
    if page in GENERATED:
        return GENERATED[page][0]
    lines = pages_dir().joinpath(page).read_text().splitlines()
    return next((line[2:].strip() for line in lines if line.startswith("# ")), page)


def index_lines() -> list[str]:
    lines = []
    for section, pages in NAV:
        lines.append(f"{section}:")
        width = max(len(p) - 3 for p in pages)
        lines += [f"  {p[:-3]:<{width}}  {title(p)}" for p in pages]
    lines += ["", "`ns_control docs PAGE` prints a page (PAGE as listed, or its last part: "
              "`ns_control docs commands`).", f"The pages are in {pages_dir()}; in a checkout, "
              "`make docs` builds them into a site (site/index.html)."]
    return lines


def add_parser(command: Any, parser: argparse.ArgumentParser) -> None:
    """The `docs` command; `parser`, ns_control's whole, is what its commands page is made of
    (given here: this module imports nothing of main.py, which imports it)."""
    docs = command("docs", help="the manual: list its pages, or print one (reference pages made from "
                                "this netspec's schema, parser and exit codes)")
    docs.add_argument("page", nargs="?", metavar="PAGE",
                      help="the page to print, as listed (e.g. tutorials/first-experiment, or "
                           "commands); none: list the pages")
    docs.add_argument("--markdown", action="store_true",
                      help="print the page's Markdown as it is (the default where the output is not a "
                           "terminal); else it is rendered for the terminal")
    docs.set_defaults(parser=parser)


def cmd_docs(args: argparse.Namespace) -> int:
    if args.page is None:
        print("\n".join(index_lines()))
        return EXIT_OK
    try:
        page = find_page(args.page)
    except NetspecError as exc:  # a PAGE the manual has not: the command's usage, as argparse's
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    text = page_text(page, args.parser)
    if args.markdown or not sys.stdout.isatty():
        sys.stdout.write(text)
        return EXIT_OK
    from rich.console import Console
    from rich.markdown import Markdown

    Console().print(Markdown(text))
    return EXIT_OK

