"""Markup from a file stays text: a received run's phase names reach plotly.js's figures
escaped (no live link in the timeline, served or in report.html), netspec's own line breaks
and bold kept."""

import json
import shutil
import urllib.request

import pytest
from browser import chromium, console_errors, open_page, serving
from netspec.web.pages import as_text
from support import REPO, wait_for

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


def grown_to(run, hosts: int) -> None:
    """`run` (a copy of the demo's) as if it ran on `hosts` hosts: each with the demo client's
    component, its exit and its stdout and stderr (what a report's page grows by per host)."""
    record = json.loads((run / "run.json").read_text())
    exit_of = record["components"]["b/client"]
    for i in range(hosts):
        host = f"web-{i:03}"
        record["hosts"][host] = record["hosts"]["b"]
        record["components"][f"{host}/client"] = exit_of
        for name in ("stdout", "stderr"):
            out = run / "hosts" / host / "client" / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(f"{host} {name}\n")
    record["plan"]["hosts"] += [{"name": f"web-{i:03}", "address": None} for i in range(hosts)]
    (run / "run.json").write_text(json.dumps(record))


@pytest.mark.e2e  # real runs, or a browser
def test_a_report_of_300_hosts_stays_under_2_mb_and_shows_every_hosts_rows_and_links(demo, tmp_path):
    from netspec.web.pages import downloads
    from netspec.web.report import write_report
    from selenium.webdriver.common.by import By

    run = tmp_path / "run"
    shutil.copytree(demo.run.resolve(), run)
    alone = write_report(run).stat().st_size
    grown_to(run, 300)
    report = write_report(run)
    # what grows with the hosts is packed as the panels' data are: 600 links and 300 exits in
    # 125 kB of HTML as such, about a tenth of it packed
    assert report.stat().st_size <= 2_000_000, report.stat().st_size
    assert report.stat().st_size - alone <= 25_000, (alone, report.stat().st_size)
    with chromium() as driver:
        open_page(driver, report.as_uri())
        links = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "#component-files a")]
        files = [f for f in downloads(run) if f.startswith("hosts/")]
        assert len(links) == len(files) > 600
        assert any(h.endswith("/hosts/web-137/client/stderr") for h in links)
        hosts = driver.execute_script("return document.querySelectorAll('#event-filter option').length")
        assert hosts == 1 + 2 + 300
        rows = driver.execute_script("return document.querySelectorAll('#exits tr, #exits-rest tr').length")
        assert rows == 1 + 302, rows
        assert not driver.find_elements(By.CSS_SELECTOR, "script.packed-html")


LONG_NAME = "a-first-real-experiment-" + "x" * 156  # 180 characters, which `check` accepts


def served_copies(demo, tmp_path, experiment: str = "stimulus-response") -> list[str]:
    """Two copies of the demo's run under tmp_path/runs, as runs of `experiment`; their refs."""
    refs = []
    for suffix in ("a", "b"):
        run = tmp_path / "runs" / experiment / f"{demo.run.resolve().name}{suffix}"
        shutil.copytree(demo.run.resolve(), run)
        record = json.loads((run / "run.json").read_text())
        record["experiment"] = record["plan"]["experiment"] = experiment
        record["id"] = run.name
        (run / "run.json").write_text(json.dumps(record))
        refs.append(f"{experiment}/{run.name}")
    return refs


LOG_X = """return [...document.querySelectorAll(arguments[0])].map((el) => el.layout.xaxis.type)"""


@pytest.mark.e2e  # real runs, or a browser
def test_latency_plots_take_a_log_x_axis_on_request_kept_in_the_url(demo, tmp_path):
    from selenium.webdriver.common.by import By

    a, b = served_copies(demo, tmp_path)
    with serving(tmp_path) as url, chromium() as driver:
        open_page(driver, f"{url}/run/{a}")
        assert set(driver.execute_script(LOG_X, "#distributions .plot")) == {"linear"}
        driver.find_element(By.CSS_SELECTOR, "#distributions input.logx").click()
        plots = "#distributions .histogram, #distributions .ecdf"
        wait_for(lambda: set(driver.execute_script(LOG_X, plots)) == {"log"}, what="the log x axes")
        assert "logx=1" in driver.current_url
        open_page(driver, driver.current_url)  # a reload (a shared link) keeps it
        wait_for(lambda: set(driver.execute_script(LOG_X, plots)) == {"log"}, what="the log x axes again")
        # and the comparison's overlaid ECDFs, where a shift of a median is read
        open_page(driver, f"{url}/compare?a={a}&b={b}")
        driver.find_element(By.CSS_SELECTOR, "input.logx").click()
        wait_for(lambda: set(driver.execute_script(LOG_X, "#compare-distributions .ecdf")) == {"log"},
                 what="the compare page's log x axes")
        assert not console_errors(driver)


@pytest.mark.e2e  # real runs, or a browser
def test_a_long_name_keeps_the_index_on_screen_and_titles_and_labels_clear_of_each_other(demo, tmp_path):
    a, b = served_copies(demo, tmp_path, LONG_NAME)
    with serving(tmp_path) as url, chromium() as driver:
        driver.set_window_size(1400, 900)
        open_page(driver, url + "/")
        cell = driver.execute_script("""const td = document.querySelector('#runs td.experiment');
            const r = td.getBoundingClientRect(); return [td.title, r.right, window.innerWidth,
            document.querySelector('#runs th[data-key=campaign]').getBoundingClientRect().right]""")
        assert cell[0] == LONG_NAME and cell[1] < 700 and cell[3] <= cell[2], cell
        # each plot's title clear of its toolbar (plotly.js's, at the top right)
        for page, plots in ((f"/run/{a}", "#heatmaps .plot"),
                            (f"/compare?a={a}&b={b}", "#compare-distributions .plot")):
            open_page(driver, url + page)
            boxes = driver.execute_script(CLEAR_OF_TOOLBAR, plots)
            assert boxes and all(title <= bar for title, bar in boxes), (page, boxes)
        # p50's label ends where p99's begins at the latest
        open_page(driver, f"{url}/run/{a}")
        labels = driver.execute_script(LABELS_APART)
        assert labels and all(p50 <= p99 + 1 and top >= bar for p50, p99, top, bar in labels), labels
        assert not console_errors(driver)


CLEAR_OF_TOOLBAR = """return [...document.querySelectorAll(arguments[0])].map((p) =>
    [p.querySelector('.gtitle').getBoundingClientRect().right,
     p.querySelector('.modebar').getBoundingClientRect().left])"""
# p50's label's right and p99's left; the labels' top and the toolbar's bottom
LABELS_APART = """return [...document.querySelectorAll('#distributions .plot')].map((p) => {
    const [p50, p99] = [...p.querySelectorAll('.annotation')].slice(0, 2)
        .map((a) => a.getBoundingClientRect());
    return [p50.right, p99.left, Math.min(p50.top, p99.top),
            p.querySelector('.modebar').getBoundingClientRect().bottom];
    })"""
