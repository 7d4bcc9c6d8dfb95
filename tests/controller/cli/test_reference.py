"""The manual's generated reference pages (controller/cli/reference.py): every key of the
schema and every argument of the parser on its page, and a page refused, naming what, where
one has no description."""

import copy
import re

import pytest
from netspec.controller.cli import main
from netspec.controller.cli.reference import Undocumented, benchmarks, commands, exit_codes, experiment_file
from netspec.controller.experiment.schemacheck import schema
from netspec.protocol import runoutcome


def keys_of(node, path=""):
    """Every key path the schema takes, as the page writes it (without its section's place)."""
    for key, sub in node.get("properties", {}).items():
        where = f"{path}.{key}" if path else key
        yield where
        if "$ref" not in sub:
            yield from keys_of(sub, where)
            if isinstance(sub.get("items"), dict):
                yield from keys_of(sub["items"], where + "[]")
            if isinstance(sub.get("additionalProperties"), dict):
                name = sub.get("propertyNames", {}).get("title", "name").upper()
                yield from keys_of(sub["additionalProperties"], f"{where}.{name}")
            for branch in sub.get("oneOf", ()):
                yield from keys_of(branch, where)
    for branch in node.get("oneOf", ()):
        yield from keys_of(branch, path)


def test_every_key_of_the_schema_is_a_row_of_the_experiment_file_page():
    full = schema()
    page = experiment_file(full)
    rows = set(re.findall(r"^\| `([^`]+)`", page, re.M))
    wanted = {*keys_of(full), *(k for d in full["$defs"].values() for k in keys_of(d))}
    assert wanted - rows == set()
    assert "`analysis.pairs.NAME.start_component`" in page and "`schedule[].links[]`" in page


def test_a_schema_key_without_a_description_fails_the_page_naming_it():
    broken = copy.deepcopy(schema())
    del broken["properties"]["services"]["properties"]["camp"]["properties"]["interval_ms"]["description"]
    del broken["$defs"]["link"]["properties"]["jitter"]["description"]
    del broken["$defs"]["duration"]["description"]
    with pytest.raises(Undocumented) as caught:
        experiment_file(broken, "copy.json")
    assert str(caught.value) == ("copy.json: no description for services.camp.interval_ms, "
                                 "$defs.link: jitter, $defs.duration")


def test_every_command_and_argument_of_ns_control_is_on_the_commands_page():
    parser = main.parser()
    page = commands(parser)
    subs = next(a for a in parser._actions if a.choices and "run" in a.choices).choices
    # a command's own commands follow it (image build)
    wanted = [w for n in subs for w in (n, *(["image build"] * (n == "image")))]
    assert re.findall(r"^## (.+)$", page, re.M) == wanted
    for name, sub in subs.items():
        section = page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for action in sub._actions:
            if action.dest not in ("help", "image_command"):
                assert " ".join(action.help.split()) in section, (name, action.dest)


def test_an_argument_without_help_fails_the_page_naming_its_command():
    parser = main.parser()
    subs = next(a for a in parser._actions if a.choices and "run" in a.choices).choices
    subs["run"].add_argument("--undocumented", action="store_true")
    subs["show"].add_argument("extra")
    with pytest.raises(Undocumented) as caught:
        commands(parser)
    assert str(caught.value) == ("ns_control's arguments: no description for ns_control run --undocumented, "
                                 "ns_control show extra")


def test_the_exit_codes_page_is_the_table_the_code_exits_by():
    page = exit_codes()
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \|", page, re.M)
    assert rows == [("0", "ok"), ("1", "failed"), ("2", "usage"), ("3", "partial"), ("130", "interrupted"),
                    ("141", "pipe")]
    codes = (runoutcome.EXIT_OK, runoutcome.EXIT_FAILED, runoutcome.EXIT_USAGE, runoutcome.EXIT_PARTIAL,
             runoutcome.EXIT_INTERRUPTED, runoutcome.EXIT_PIPE)
    assert tuple(e.code for e in runoutcome.EXITS) == codes


def test_the_benchmarks_page_is_the_headline_section_up_to_the_next_heading():
    text = ("# Results\n\nintro\n\n## Headline figures\n\n| figure | value |\n|---|---|\n| step | 5 ms |\n\n"
            "## Older: issue 3\n\n| old | 1 |\n")
    page = benchmarks(text)
    assert "| step | 5 ms |" in page and "old" not in page and "intro" not in page
    with pytest.raises(Exception, match="no '## Headline figures' section"):
        benchmarks("# Results\n\n## Issue 3\n")
    with pytest.raises(Exception, match="holds no table"):
        benchmarks("## Headline figures\n\nsoon\n## Issue 3\n")

