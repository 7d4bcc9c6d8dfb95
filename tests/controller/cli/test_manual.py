"""`ns_control docs`: the manual read from netspec as pip installs it (this build's wheel, in
a directory of its own, run from elsewhere than the checkout), and the --help epilogues
that point at it."""

import os
import re
import subprocess
import sys

import pytest
from netspec.controller.cli.main import parser
from netspec.controller.cli.manual import PAGES, find_page
from netspec.controller.cli.reference import commands, experiment_file
from netspec.controller.experiment.schemacheck import schema
from netspec.controller.hosts.wheels import build_id, local_wheels
from netspec.protocol.errors import NetspecError
from netspec.protocol.runoutcome import EXIT_USAGE
from support import REPO
from support import ns_control as local_ns_control


@pytest.fixture
def installed(tmp_path):
    """This build's wheel installed alone into a directory (its dependencies are the venv's),
    and a function running its ns_control from a directory outside the checkout."""
    wheel = next(w for w in local_wheels(build_id()) if w.name.startswith("netspec-"))
    target = tmp_path / "site-packages"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--disable-pip-version-check", "--target", str(target), str(wheel)], check=True)
    env = {**os.environ, "PYTHONPATH": str(target)}

    def ns_control(*args):
        return subprocess.run([str(target / "bin" / "ns_control"), *args], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=60)
    return target, ns_control


def test_the_manual_is_listed_and_printed_by_an_installed_netspec(installed):
    target, ns_control = installed
    listed = ns_control("docs")
    assert listed.returncode == 0, listed.stderr
    assert f"The pages are in {target / 'netspec' / 'manual'};" in listed.stdout
    for page in PAGES:
        assert f"  {page.removesuffix('.md')} " in listed.stdout
    assert re.search(r"^  reference/commands +Commands$", listed.stdout, re.M)
    # a page as shipped, and a reference page made on the spot from the installed parser
    printed = ns_control("docs", "stream-format")
    assert printed.returncode == 0 and printed.stdout == (REPO / "docs" / "stream-format.md").read_text()
    schema_page = ns_control("docs", "reference/experiment-file.md")
    assert schema_page.returncode == 0 and schema_page.stdout == experiment_file(schema())
    assert "| `analysis.pairs.NAME.start_component` |" in schema_page.stdout
    commands_page = ns_control("docs", "commands")  # made of the parser main gives the command
    assert commands_page.returncode == 0 and commands_page.stdout == commands(parser())


def test_the_help_points_at_the_manual_and_its_pages():
    assert "`ns_control docs` lists its pages" in " ".join(parser().format_help().split())
    subs = next(a for a in parser()._actions if a.choices and "run" in a.choices).choices
    assert ("The manual: `ns_control docs reference/experiment-file`, `ns_control docs reference/exit-codes`."
            in " ".join(subs["run"].format_help().split()))
    for name, sub in subs.items():
        for page in re.findall(r"`ns_control docs ([^`]+)`", sub.format_help()):
            assert find_page(page) in PAGES, (name, page)

def test_a_page_is_found_by_its_path_or_its_last_part_alone(tmp_path):
    assert find_page("commands") == find_page("reference/commands.md") == "reference/commands.md"
    assert find_page("tutorials/campaign") == "tutorials/campaign.md"
    with pytest.raises(NetspecError, match=r"^no page 'reference': `ns_control docs` lists them \(index, "):
        find_page("reference")
    wrong = local_ns_control("docs", "nosuchpage", cwd=tmp_path)  # a wrong argument: usage
    assert wrong.returncode == EXIT_USAGE and wrong.stderr.startswith("error: no page 'nosuchpage': "), wrong
