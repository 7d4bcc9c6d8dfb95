"""The browser serves what is under its roots, its links followed: a run directory, a run's
file or a component's directory that is a link out of the root is not served, and said."""

import shutil
import urllib.error
import urllib.request

import pytest
from browser import serving
from support import REPO

RUN = REPO / "tests" / "data" / "runs" / "stimulus-response" / "20261121T181343Z-23d1a4"
LINKED = "20261121T181343Z-11111a"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def root(tmp_path):
    """runs/ under tmp_path/served, and a secret and a run outside it."""
    runs = tmp_path / "served" / "runs"
    shutil.copytree(RUN, runs / "stimulus-response" / RUN.name)
    shutil.copytree(RUN, tmp_path / "elsewhere" / LINKED)
    (tmp_path / "elsewhere" / "secret").write_text("root:not-yours\n")
    (tmp_path / "elsewhere" / "server").mkdir()
    (tmp_path / "elsewhere" / "server" / "stdout").write_text("root:not-yours\n")
    return tmp_path


def test_a_run_directory_that_links_out_of_the_root_is_not_served_and_said(root):
    (root / "served" / "runs" / "stimulus-response" / LINKED).symlink_to(root / "elsewhere" / LINKED)
    with serving(root / "served") as url:
        status, page = get(f"{url}/run/stimulus-response/{LINKED}")
        assert status == 404 and "leads out of" in page
        assert get(f"{url}/run/stimulus-response/{LINKED}/file/run.json")[0] == 404
        status, index = get(f"{url}/")
        assert status == 200 and f"{LINKED}/run.json: leads out of" in index


def test_a_runs_file_or_component_directory_that_links_out_is_not_served(root):
    run = root / "served" / "runs" / "stimulus-response" / RUN.name
    (run / "hosts" / "a").mkdir(parents=True)
    (run / "hosts" / "a" / "server").symlink_to(root / "elsewhere" / "server")
    ref = f"stimulus-response/{RUN.name}"
    with serving(root / "served") as url:
        status, page = get(f"{url}/run/{ref}")
        assert status == 200 and "hosts/a/server/stdout" not in page
        status, body = get(f"{url}/run/{ref}/file/hosts/a/server/stdout")
        assert status == 404 and "not-yours" not in body
        (run / "experiment.yaml").symlink_to(root / "elsewhere" / "secret")
        status, body = get(f"{url}/run/{ref}/file/experiment.yaml")
        assert status == 404 and "not-yours" not in body
        status, page = get(f"{url}/run/{ref}")
        assert status == 404 and "experiment.yaml lead out of the run by a link" in page


@pytest.mark.e2e  # real runs, or a browser
def test_a_failures_output_that_links_out_of_the_run_is_not_shown_and_said(results, tmp_path):
    from netspec.protocol.runrecord import read_run
    from netspec.web.timeline import failures

    failing = results / "runs" / "browse-failing"
    run = tmp_path / "browse-failing" / sorted(p.name for p in failing.iterdir())[0]
    shutil.copytree(failing / run.name, run)
    (tmp_path / "secret").write_text("root:not-yours\n")
    stdout = run / "hosts" / "b" / "w2" / "stdout"
    assert "w2" in [f["component"] for f in failures(read_run(run), run)]
    stdout.unlink()
    stdout.symlink_to(tmp_path / "secret")
    (w2,) = [f for f in failures(read_run(run), run) if f["component"] == "w2"]
    assert w2["output"]["stdout"] == "(not shown: hosts/b/w2/stdout leads out of the run)"
