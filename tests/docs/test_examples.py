"""Every example the manual marks runs as the page shows it. An HTML comment (the site does
not show it) on the line right before a fenced block marks the block:

    <!-- example: check [NAME] -->   an experiment file: `ns_control check` passes on it (kept as
                                     NAME in the page's directory when named)
    <!-- example: file NAME -->      written to NAME in the page's directory
    <!-- example: sh [exit=N] -->    run by `bash -euo pipefail` there, the venv's bin first on
                                     PATH: it exits 0 (or N)
    <!-- example: sql -->            a query on the demo run's tables (netspec.results' names):
                                     it returns at least one row
    <!-- example: python -->         a script run by the venv's python there: it exits 0

Each page (docs/**/*.md, README.md) is one test, its blocks in order, in a fresh directory of
this session's: `runs/` holds a copy of the session's demo run (so `latest` is the demo) and
`experiments` links to the repository's, so a command reads as a user types it at the
checkout's root. A page whose commands reach Docker gets the session's image, and one whose
commands run pods gets the session's cluster (the `k8s_cluster` fixture, as KUBECONFIG). A
marker this file cannot read (an unknown kind, a missing name, no fenced
block after it) fails the page, naming its line: a typo cannot hide an example."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import pytest
from netspec.results import open_run
from support import REPO, session_dir

# Any comment that starts like a marker is read as one, so that a misspelt marker fails
# rather than leaving its block unrun.
LOOSE = re.compile(r"^\s*<!--\s*example", re.I)
MARKER = re.compile(r"^\s*<!-- example: (?P<kind>\S+)(?: (?P<arg>\S+))? -->\s*$")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})")
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$")
EXIT = re.compile(r"^exit=(?P<code>\d{1,3})$")
KINDS = ("check", "file", "sh", "sql", "python")
# Each block's deadline, s: a check reads a file; a command may run an experiment or two
# (3-5 s each here, more on a loaded machine, a container host's start besides).
CHECK_S, RUN_S = 60.0, 240.0
SCRIPTS = Path(sysconfig.get_path("scripts"))


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # the marker's, 1-based
    kind: str
    arg: str | None
    text: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}: example: {self.kind}{f' {self.arg}' if self.arg else ''}"


def parse(text: str, page: str) -> tuple[list[Block], list[str]]:
    """The marked blocks of a page, in order, and what is wrong with its markers (each naming
    the page and the marker's line). A marker inside a fenced block is the block's text (a page
    may show the convention), not a marker."""
    lines = text.splitlines()
    blocks: list[Block] = []
    problems: list[str] = []
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if opened:  # an unmarked block: skip to its end
            i = _fence_end(lines, i, opened)[1]
            continue
        if not LOOSE.match(lines[i]):
            i += 1
            continue
        line, where = i + 1, f"{page}:{i + 1}"
        marker = MARKER.match(lines[i])
        if marker is None:
            problems.append(f"{where}: not a marker this test reads: {lines[i].strip()!r} "
                            f"(`<!-- example: KIND [ARG] -->`, KIND one of {', '.join(KINDS)})")
            i += 1
            continue
        kind, arg = marker["kind"], marker["arg"]
        wrong = _wrong_argument(kind, arg)
        fence = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if wrong:
            problems.append(f"{where}: {wrong}")
        if fence is None:
            problems.append(f"{where}: the marker `{kind}` is not followed by a fenced block "
                            "on the next line")
            i += 1
            continue
        body, i = _fence_end(lines, i + 1, fence)
        if not wrong:
            blocks.append(Block(page, line, kind, arg, body))
    return blocks, problems


def _fence_end(lines: list[str], start: int, opened: re.Match[str]) -> tuple[str, int]:
    """The text of the fenced block opened at line `start` (its opening indentation taken off
    each line), and the index of the line after its closing fence (or the page's end)."""
    indent, fence = len(opened["indent"]), opened["fence"]
    closing = re.compile(rf"^ *{re.escape(fence[0])}{{{len(fence)},}}\s*$")
    body = []
    for j in range(start + 1, len(lines)):
        if closing.match(lines[j]):
            return "".join(f"{line[min(indent, len(line) - len(line.lstrip(' '))):]}\n"
                           for line in body), j + 1
        body.append(lines[j])
    return "".join(f"{line}\n" for line in body), len(lines)


def _wrong_argument(kind: str, arg: str | None) -> str | None:
    if kind not in KINDS:
        return f"unknown kind of example {kind!r} (one of {', '.join(KINDS)})"
    if kind == "file" and arg is None:
        return "`file` needs the NAME to write the block to"
    if kind in ("check", "file") and arg is not None and not NAME.match(arg):
        return f"{arg!r}: a NAME is a relative path of letters, digits, '_', '.', '-' (no '..', no '/' first)"
    if kind == "sh" and arg is not None and not EXIT.match(arg):
        return f"`sh` takes `exit=N` alone, not {arg!r}"
    if kind in ("sql", "python") and arg is not None:
        return f"`{kind}` takes no argument, not {arg!r}"
    return None


def marked_pages() -> list[str]:
    """Every page of the manual and the README that has a marker (or something like one)."""
    pages = [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]
    return [str(p.relative_to(REPO)) for p in pages
            if p.is_file() and any(LOOSE.match(line) for line in p.read_text().splitlines())]


def needs_docker(blocks: list[Block]) -> bool:
    """Whether a command of the page reaches a Docker engine: it names docker or builds
    netspec's image, or runs a file an earlier block of the page wrote with `docker:` hosts."""
    return _names(blocks, "docker:", ("docker", "image build"))


def needs_kubernetes(blocks: list[Block]) -> bool:
    """Whether a command of the page reaches a cluster: it runs the bundled experiment on
    pods, or a file an earlier block of the page wrote with `kubernetes:` hosts."""
    return _names(blocks, "kubernetes:", ("on_kubernetes",))


def _names(blocks: list[Block], key: str, words: tuple[str, ...]) -> bool:
    written = {b.arg for b in blocks if b.kind in ("check", "file") and b.arg and key in b.text}
    return any(b.kind in ("sh", "python") and any(word in b.text for word in (*words, *written))
               for b in blocks)


def test_a_marker_of_an_unknown_kind_or_without_a_block_fails_naming_its_line():
    page = ("# A page\n\n<!-- example: chek -->\n```yaml\nexperiment: x\n```\n\n"
            "<!-- example: sh -->\n\nls\n\n<!--example:sql-->\n```sql\nSELECT 1\n```\n"
            "<!-- example: file -->\n```\nx\n```\n")
    blocks, problems = parse(page, "p.md")
    assert blocks == []
    assert problems == [
        "p.md:3: unknown kind of example 'chek' (one of check, file, sh, sql, python)",
        "p.md:8: the marker `sh` is not followed by a fenced block on the next line",
        "p.md:12: not a marker this test reads: '<!--example:sql-->' (`<!-- example: KIND [ARG] -->`, "
        "KIND one of check, file, sh, sql, python)",
        "p.md:16: `file` needs the NAME to write the block to"]


def test_marked_blocks_are_read_in_order_with_their_lines_and_a_shown_marker_is_text():
    page = ("Intro\n<!-- example: file prog.py -->\n```python\nprint(1)\n```\n"
            "````markdown\n<!-- example: sh -->\n```\nfalse\n```\n````\n"
            "1. a step\n\n   <!-- example: sh exit=2 -->\n"
            "   ```bash\n   ns_control check bad.yaml\n     indented\n   ```\n")
    blocks, problems = parse(page, "p.md")
    assert problems == []
    assert blocks == [Block("p.md", 2, "file", "prog.py", "print(1)\n"),
                      Block("p.md", 14, "sh", "exit=2", "ns_control check bad.yaml\n  indented\n")]


def test_a_page_needs_docker_where_a_command_builds_the_image_or_runs_a_file_with_docker_hosts():
    def page(*specs):
        return [Block("p.md", i, kind, arg, text) for i, (kind, arg, text) in enumerate(specs)]
    docker, local = ("check", "c.yaml", "hosts: {a: {docker: {}}}\n"), ("check", "s.yaml", "hosts: {a: {}}\n")
    assert needs_docker(page(("sh", None, "ns_control image build\n")))
    assert needs_docker(page(docker, ("sh", None, "ns_control run c.yaml\n")))
    assert not needs_docker(page(docker, ("sh", None, "ls\n")))
    assert not needs_docker(page(local, ("sh", None, "ns_control run s.yaml\n")))


def test_a_page_needs_a_cluster_where_a_command_runs_a_file_with_kubernetes_hosts():
    pods = Block("p.md", 1, "check", "pods.yaml", "hosts: {a: {kubernetes: {}}}\n")
    assert needs_kubernetes([pods, Block("p.md", 2, "sh", None, "ns_control run pods.yaml\n")])
    assert needs_kubernetes([Block("p.md", 1, "sh", None, "ns_control run x/on_kubernetes.yaml\n")])
    assert not needs_kubernetes([pods, Block("p.md", 2, "sh", None, "ls\n")])
    assert not needs_docker([pods, Block("p.md", 2, "sh", None, "ns_control run pods.yaml\n")])


def test_a_name_that_leaves_the_pages_directory_is_refused():
    page = "<!-- example: file ../x -->\n```\nx\n```\n<!-- example: check /etc/x -->\n```\n```\n"
    _, problems = parse(page, "p.md")
    assert [p.split(": ", 1)[0] for p in problems] == ["p.md:1", "p.md:5"]


@pytest.mark.e2e
@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", marked_pages())
def test_every_marked_example_of_the_page_runs_as_shown(page: str, demo, request: pytest.FixtureRequest):
    blocks, problems = parse((REPO / page).read_text(), page)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)
    if needs_docker(blocks):
        request.getfixturevalue("docker_image")  # skips, saying why, where Docker's engine is not installed
    # The session's cluster, as kubectl would find it; skips, saying why, where none can be built.
    cluster = {"KUBECONFIG": str(request.getfixturevalue("k8s_cluster"))} if needs_kubernetes(blocks) else {}
    where = session_dir() / "examples" / page.replace("/", "-").removesuffix(".md")
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    shutil.copytree(demo.where / "runs", where / "runs", symlinks=True)
    (where / "experiments").symlink_to(REPO / "experiments")
    demo_run = where / "runs" / demo.run.resolve().relative_to((demo.where / "runs").resolve())
    env = {**os.environ, "PATH": f"{SCRIPTS}{os.pathsep}{os.environ.get('PATH', '')}", **cluster}
    for block in blocks:
        _run(block, where, demo_run, env)
    shutil.rmtree(where, ignore_errors=True)


def _run(block: Block, where: Path, demo_run: Path, env: dict[str, str]) -> None:
    if block.kind in ("check", "file"):
        path = where / (block.arg or f".example-{block.line}.yaml")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.text)
        if block.kind == "check":
            _expect(block, [str(SCRIPTS / "ns_control"), "check", str(path.relative_to(where))], None, where,
                    env, 0, CHECK_S)
    elif block.kind == "sh":
        code = int(EXIT.match(block.arg)["code"]) if block.arg else 0
        _expect(block, ["bash", "-euo", "pipefail", "-c", block.text], None, where, env, code, RUN_S)
    elif block.kind == "python":
        _expect(block, [sys.executable, "-"], block.text, where, env, 0, RUN_S)
    else:
        try:
            with open_run(demo_run).tables() as tables:
                rows = tables.sql(block.text).fetchall()
        except Exception as exc:  # the query's error is the failure to show
            pytest.fail(f"{block.where}: the query failed on the demo run's tables: {exc}\n{block.text}",
                        pytrace=False)
        if not rows:
            pytest.fail(f"{block.where}: the query returned no row on the demo run's tables\n{block.text}",
                        pytrace=False)


def _expect(block: Block, argv: list[str], stdin: str | None, where: Path, env: dict[str, str],
            code: int, deadline: float) -> None:
    """Run `argv` in the page's directory under `deadline`; fail naming the block unless it
    exits `code`. Whatever it left running in its process group is ended after."""
    proc = subprocess.Popen(argv, cwd=where, env=env, text=True, start_new_session=True,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    late = False
    try:
        output, _ = proc.communicate(stdin, timeout=deadline)
    except subprocess.TimeoutExpired:
        late = True
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    if late:
        try:  # bounded: what it started in a session of its own may hold the pipe open
            output, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            output = "(not read: a process it started outside its group holds its output open)"
        pytest.fail(f"{block.where}: still running after its deadline of {deadline:.0f} s; its output:\n"
                    f"{output}", pytrace=False)
    if proc.returncode != code:
        pytest.fail(f"{block.where}: exited {proc.returncode}, not {code}; its output:\n{output}\n"
                    f"--- the block:\n{block.text}", pytrace=False)
