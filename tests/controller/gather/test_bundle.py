"""Run bundles: export writes a run with its RO-Crate; import checks every name and hash
before anything lands under the runs directory, and the imported run works as any other."""

import io
import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest
from netspec.controller.gather.bundle import CRATE, BundleError, export_run, import_run
from support import REPO, ns_control

STORED = REPO / "tests" / "data" / "runs"
RUN_ID = "20261121T181343Z-23d1a4"


@pytest.fixture
def bundle(tmp_path):
    """The stored run, exported."""
    return export_run(STORED / "stimulus-response" / RUN_ID, tmp_path / "run.tar.gz")


def test_export_describes_the_run_in_an_ro_crate_and_import_brings_it_back(bundle, tmp_path):
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        crate = json.load(tar.extractfile(f"stimulus-response/{RUN_ID}/{CRATE}"))
    assert set(names) == {f"stimulus-response/{RUN_ID}/{n}" for n in (CRATE, "run.json")}
    graph = {e["@id"]: e for e in crate["@graph"]}
    assert graph[CRATE]["conformsTo"] == {"@id": "https://w3id.org/ro/crate/1.1"}
    root = graph["./"]
    assert root["identifier"] == RUN_ID and root["hasPart"] == [{"@id": "run.json"}]
    assert len(graph["run.json"]["sha256"]) == 64 and root["experiment_sha256"]
    assert {"#netspec", "#python"} <= {i["@id"] for i in root["instrument"]}
    run = import_run(bundle, tmp_path / "runs")
    assert run == tmp_path / "runs" / "stimulus-response" / RUN_ID
    original = STORED / "stimulus-response" / RUN_ID / "run.json"
    assert (run / "run.json").read_bytes() == original.read_bytes()
    with pytest.raises(BundleError, match="is already in"):
        import_run(bundle, tmp_path / "runs")


def hostile(tmp_path, bundle, change):
    """The bundle rewritten member by member through `change(member, data) -> [(info, data)]`;
    what it adds after the crate (the first member) is added once."""
    out = tmp_path / "hostile.tar.gz"
    with tarfile.open(bundle) as src, tarfile.open(out, "w:gz") as dst:
        for m in src.getmembers():
            read = src.extractfile(m).read()
            for info, data in (change(m, read) if m.name.endswith(CRATE) else [(m, read)]):
                dst.addfile(info, io.BytesIO(data) if data is not None else None)
    return out


def renamed(name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


@pytest.mark.parametrize(("change", "message"), [
    (lambda m, d: [(m, d), renamed(f"stimulus-response/{RUN_ID}/../../escape", b"x")], "not inside a run"),
    (lambda m, d: [(m, d), renamed("/tmp/absolute", b"x")], "not inside a run"),
    (lambda m, d: [(m, d), renamed(f"other/{RUN_ID}/x", b"x")], "not under one runs/<experiment>/<run id>"),
    (lambda m, d: [(m, d), renamed(f"stimulus-response/{RUN_ID}/extra", b"x")], "not listed: ['extra']"),
    (lambda m, d: [(m, d), renamed(f"stimulus-response/{RUN_ID}/run.json",
                                   (STORED / "stimulus-response" / RUN_ID / "run.json").read_bytes())],
     "appears twice"),
    (lambda m, d: [renamed(m.name, re.sub(rb'"sha256": "[0-9a-f]{64}"', b'"sha256": "' + b"0" * 64 + b'"',
                                          d))],
     "run.json does not match its sha256 in the crate"),
    (lambda m, d: [(m, d), (_symlink(f"stimulus-response/{RUN_ID}/link", "/etc/passwd"), None)],
     "links are refused"),
    (lambda m, d: [renamed(f"stimulus-response/{RUN_ID}/first", b"x"), (m, d)],
     f"its first file is 'stimulus-response/{RUN_ID}/first', not its {CRATE}"),
])
def test_import_refuses_an_archive_that_escapes_or_does_not_match_its_crate(bundle, tmp_path, change,
                                                                           message):
    with pytest.raises(BundleError, match=message.replace("[", r"\[").replace("]", r"\]")):
        import_run(hostile(tmp_path, bundle, change), tmp_path / "runs")
    assert not (tmp_path / "escape").exists() and not any((tmp_path / "runs").rglob("run.json"))


def _symlink(name, target):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    return info


def test_import_of_a_file_that_is_not_an_archive_says_so(tmp_path):
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"\x1f\x8b" + b"\0" * 100)
    done = ns_control("import", str(junk), cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.startswith(f"error: {junk}: not a readable run bundle")


def test_import_refuses_a_run_id_that_ends_in_a_newline(bundle, tmp_path):
    # Every member under "<run id>\n/": a pattern anchored with '$' took it as a run id.
    out = tmp_path / "newline.tar.gz"
    with tarfile.open(bundle) as src, tarfile.open(out, "w:gz") as dst:
        for m in src.getmembers():
            dst.addfile(renamed(m.name.replace(RUN_ID, RUN_ID + "\n"), src.extractfile(m).read())[0],
                        src.extractfile(m))
    with pytest.raises(BundleError, match="is not under one runs/<experiment>/<run id>/"):
        import_run(out, tmp_path / "runs")
    assert not any((tmp_path / "runs").rglob("run.json"))


def written_bytes() -> int:
    """What this process has written so far (the kernel's count, /proc/self/io's wchar)."""
    io_counts = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(io_counts["wchar"])


def test_import_of_a_bomb_refuses_a_member_larger_than_its_crate_says_before_writing_it(bundle, tmp_path):
    # run.json replaced by 64 MB of zeros (a few hundred kB of gzip), its crate left as it was.
    bomb, zeros = tmp_path / "bomb.tar.gz", 64 << 20
    with tarfile.open(bundle) as src, tarfile.open(bomb, "w:gz", compresslevel=1) as dst:
        for m in src.getmembers():
            if m.name.endswith("/run.json"):
                m.size = zeros
                dst.addfile(m, io.BytesIO(bytes(zeros)))
            else:
                dst.addfile(m, src.extractfile(m))
    assert bomb.stat().st_size < zeros / 100
    before = written_bytes()
    with pytest.raises(BundleError, match=f"run.json' is {zeros} bytes, its crate says"):
        import_run(bomb, tmp_path / "runs")
    assert written_bytes() - before < 1 << 20  # the crate, and none of the zeros
    assert not any((tmp_path / "runs").rglob("*.json"))


def test_import_refuses_a_run_larger_than_its_limit_before_writing_any_of_it(bundle, tmp_path):
    before = written_bytes()
    with pytest.raises(BundleError, match=r"its files are \d+ bytes, more than the limit of 100 "
                                          r"\(import --max-size\): nothing unpacked"):
        import_run(bundle, tmp_path / "runs", limit=100)
    assert written_bytes() - before < 1 << 20
    assert not any((tmp_path / "runs").rglob("run.json"))


def test_fetch_of_an_imported_bundle_runs_its_graph_within_its_result_set_and_no_query(demo, tmp_path):
    # A bundle's author wrote its run.json (and a crate to match): a node named to climb out,
    # a where that reads a file.
    run = tmp_path / "made" / demo.run.resolve().parent.name / demo.run.resolve().name
    shutil.copytree(demo.run.resolve(), run)
    record = json.loads((run / "run.json").read_text())
    secret = tmp_path / "secret"
    secret.write_text("root:hash\n")
    record["plan"]["analysis"]["graph"] = {
        "../../../../escape": {"filter": "export", "input": "events", "format": "csv"},
        "peek": {"filter": "select", "input": "events",
                 "where": f"(SELECT count(*) FROM read_text('{secret}')) > 0"},
        "peeked": {"filter": "export", "input": "peek", "format": "csv"}}
    (run / "run.json").write_text(json.dumps(record))
    imported = import_run(export_run(run, tmp_path / "hostile.tar.gz"), tmp_path / "runs")
    before = set(tmp_path.rglob("*"))
    done = ns_control("fetch", imported.name, "--runs", str(tmp_path / "runs"), cwd=tmp_path, env=demo.env)
    assert done.returncode == 0, done.stderr
    escape = "analysis node ../../../../escape (export): analysis node '../../../../escape' is not a name"
    assert escape in done.stdout
    assert "analysis node peek (select): where:" in done.stdout and "subquery is not allowed" in done.stdout
    assert "analysis node peeked: skipped, its input peek failed" in done.stdout
    assert all(imported / "merged" in p.parents for p in set(tmp_path.rglob("*")) - before)
