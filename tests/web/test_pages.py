"""Markup from a file stays text: a received run's phase names reach plotly.js's figures
escaped (no live link in the timeline, served or in report.html), netspec's own line breaks
and bold kept."""

import json
import shutil
import urllib.request

import pytest
from browser import chromium, open_page, serving
from netspec.web.pages import as_text
from support import REPO

RUN = REPO / "tests" / "data" / "runs" / "stimulus-response" / "20261121T181343Z-23d1a4"
LINK = '<a href="https://attacker.example/">listen</a>'


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def received(tmp_path):
    """A copy of a run whose record (anyone's, once received) names a phase with a link."""
    run = tmp_path / "runs" / "stimulus-response" / RUN.name
    shutil.copytree(RUN, run)
    record = json.loads((run / "run.json").read_text())
    record["steps"][3]["phase"] = LINK
    (run / "run.json").write_text(json.dumps(record))
    return f"stimulus-response/{RUN.name}"


def test_a_figures_texts_are_escaped_and_its_own_markup_kept():
    figure = {"data": [{"name": "<a href='x'>n</a>", "hovertext": ["<b>a</b><br>&amp;"], "y": [1, None]}],
              "layout": {"annotations": [{"text": "<span style='x'>s</span>"}]}}
    shown = as_text({"figure": figure, "rows": [{"message": "<i>as is</i>"}]})
    assert shown["figure"]["data"][0] == {"name": "&lt;a href='x'&gt;n&lt;/a&gt;",
                                          "hovertext": ["<b>a</b><br>&amp;amp;"], "y": [1, None]}
    assert shown["figure"]["layout"]["annotations"][0]["text"] == "&lt;span style='x'&gt;s&lt;/span&gt;"
    assert shown["rows"] == [{"message": "<i>as is</i>"}]  # not a figure: the page writes it as text


def test_a_received_runs_phase_name_reaches_the_timeline_as_text(tmp_path):
    ref = received(tmp_path)
    with serving(tmp_path) as url, urllib.request.urlopen(f"{url}/api/run/{ref}/timeline",
                                                          timeout=30) as response:
        figure = json.loads(response.read())
    texts = list(strings(figure))
    assert not [t for t in texts if "<a" in t], texts
    assert any("&lt;a href=\"https://attacker.example/\"&gt;listen&lt;/a&gt;" in t for t in texts)


@pytest.mark.e2e  # real runs, or a browser
def test_a_received_runs_phase_name_draws_no_link_in_the_browser(tmp_path):
    ref = received(tmp_path)
    with serving(tmp_path) as url, chromium() as driver:
        open_page(driver, f"{url}/run/{ref}")
        assert driver.execute_script("return document.querySelectorAll('#timeline a').length") == 0
        shown = driver.execute_script(
            "return [...document.querySelectorAll('#timeline .annotation-text')].map((t) => t.textContent)")
        assert LINK in shown, shown


@pytest.mark.e2e  # real runs, or a browser
def test_a_received_runs_phase_name_draws_no_link_in_its_report(demo, tmp_path):
    from netspec.web.report import write_report

    run = tmp_path / "run"
    shutil.copytree(demo.run.resolve(), run)
    record = json.loads((run / "run.json").read_text())
    record["steps"][3]["phase"] = LINK
    (run / "run.json").write_text(json.dumps(record))
    report = write_report(run)
    with chromium() as driver:
        open_page(driver, report.as_uri())
        assert driver.execute_script("return document.querySelectorAll('#timeline a').length") == 0
        shown = driver.execute_script(
            "return [...document.querySelectorAll('#timeline .annotation-text')].map((t) => t.textContent)")
        assert LINK in shown, shown
