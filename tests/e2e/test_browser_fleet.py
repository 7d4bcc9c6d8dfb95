"""A fleet's run page in a real headless Chromium, on the session's fleet run (tests/browser.py
FLEET: 16 hosts in two groups, past the page's fold): the first screen answers "did it work,
where did the time go"; the page's state lives in its URL; a participant ended at its deadline
is triaged by the deadline and its last sign of life; `ns_control report` has the per-phase
figures and judges trends within a phase. One page load, several checks."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest
from browser import FLEET_HOSTS, chromium, console_errors, open_page, run_ref, serving
from netspec.protocol.runrecord import read_run
from selenium.webdriver.common.by import By
from support import ns_control, wait_for

pytestmark = pytest.mark.e2e

SCREEN = (1400, 900)


def _in_first_screen(driver, css: str) -> bool:
    return driver.execute_script("""const el = document.querySelector(arguments[0]);
        if (!el) return false; const r = el.getBoundingClientRect();
        return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight""", css)


def test_a_fleets_first_screen_says_whether_it_worked_and_where_the_time_went(fleet_results: Path,
                                                                              tmp_path: Path):
    ref = run_ref(fleet_results, "browse-fleet")
    record = read_run(fleet_results / "runs" / ref)
    with serving(fleet_results) as url, chromium() as driver:
        driver.set_window_size(*SCREEN)
        open_page(driver, f"{url}/run/{ref}", unfold=False)
        driver.save_screenshot(str(tmp_path / "fleet.png"))
        # n/N ok per step, for the fleet and per group, on the first screen
        assert _in_first_screen(driver, "#grid")
        heads = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#grid thead th.group")]
        assert heads == ["db (4)", "web (12)"], heads
        grid = {r.find_elements(By.TAG_NAME, "td")[1].text:
                [c.text for c in r.find_elements(By.CSS_SELECTOR, ".ok-cell")]
                for r in driver.find_elements(By.CSS_SELECTOR, "#grid tbody tr")}
        assert len(grid) == len(record.steps)
        assert grid["warm"] == ["16/16", "4/4", "12/12"], grid
        assert grid["finish"][2] == "11/12", grid  # web-03 raised (db-2 was skipped, out since work)
        # the failed and the slowest named, on the first screen
        failed = driver.find_element(By.ID, "failed-list").text
        assert "web-03/xweb03 error in finish" in failed, failed
        assert "db-2/xdb2 missed its deadline in work" in failed, failed
        slow = driver.find_element(By.ID, "slow-list").text
        assert "web-07/xweb07" in slow and "in soak" in slow, slow
        assert _in_first_screen(driver, "#named")
        # per-phase figures: latency, CPU and network per phase
        phases = {r.find_elements(By.TAG_NAME, "td")[1].text:
                  [c.text for c in r.find_elements(By.TAG_NAME, "td")]
                  for r in driver.find_elements(By.CSS_SELECTOR, "#phases tbody tr")}
        assert "PLAY/span p50" in phases["warm"][6] and "PLAY/span p50" in phases["soak"][6], phases
        assert phases["soak"][4].endswith(")"), phases  # CPUs mean / max (its busiest host)
        assert any(phases[p][5].endswith("B/s") for p in ("warm", "soak", "work", "finish")), phases
        assert driver.execute_script("return document.querySelector('#phases').getBoundingClientRect().top") \
            < SCREEN[1] * 1.5
        # hosts folded into their groups: a row per group, the legend beside the rows
        rows = driver.execute_script("return document.getElementById('timeline').layout.yaxis.categoryarray")
        assert sorted(rows) == ["db (4 hosts)", "web (12 hosts)"], rows
        assert driver.execute_script("return document.getElementById('timeline').layout.legend.x") > 1
        # the programs' events on the same time axis as the phases, on their (folded) rows
        ticks = driver.execute_script("""const t = document.getElementById('timeline').data
            .find((t) => t.name === 'events'); return t && [new Set(t.y).size, t.hovertext[0]]""")
        assert ticks and ticks[0] == 2 and " PLAY/" in ticks[1], ticks
        # a warning naming every host (the shared kernel's) names three and the count, in its
        # section (open where the warnings are few: at 1000 hosts its names took a screen); the
        # whole warning on request
        checks = driver.find_element(By.ID, "checks-section")
        was_open = checks.get_attribute("open") is not None
        if not was_open:
            checks.find_element(By.TAG_NAME, "summary").click()
        warned = driver.execute_script("return document.getElementById('warnings').innerText")
        kernel = next((line for line in warned.splitlines() if "share one kernel" in line), "")
        named = [h for h in FLEET_HOSTS if h in kernel.replace(",", " ").split()]
        assert len(named) == 3 and "(16 in all)" in kernel, warned
        # a warning per host (CAMP's "process has exited"): three of them and the count of the rest
        assert warned.count("has exited") == 3 and "and 13 more like these (16 in all)" in warned, warned
        whole = driver.find_element(By.CSS_SELECTOR, "#warnings details.whole")
        assert whole.get_attribute("open") is None
        assert all(h in whole.get_attribute("textContent") for h in FLEET_HOSTS)
        if not was_open:  # folded again, as the user found it
            checks.find_element(By.TAG_NAME, "summary").click()
        # the components' exits: the unclean first, eight of sixteen when the section is opened
        driver.find_element(By.CSS_SELECTOR, "#exits-section > summary").click()
        exits = driver.execute_script("return document.getElementById('exits').innerText")
        assert len(driver.find_elements(By.CSS_SELECTOR, "#exits tbody tr")) == 8, exits
        assert "xdb2" in exits and "xweb03" in exits, exits
        more = driver.find_element(By.CSS_SELECTOR, "#exits-rest > summary").text
        assert more.startswith("and 8 more"), more
        driver.find_element(By.CSS_SELECTOR, "#exits-section > summary").click()
        # the page is at most three screens before the user asks for more
        height = driver.execute_script("return document.documentElement.scrollHeight")
        assert height <= 3 * driver.execute_script("return window.innerHeight"), height
        # the rest on request: a folded section draws when opened, and the URL keeps it open
        for section in ("distributions", "resources", "clocks", "events"):
            driver.find_element(By.CSS_SELECTOR, f"#{section}-section > summary").click()
        wait_for(lambda: driver.execute_script("""
            return ['#distributions .histogram', '#heatmaps .plot', '#clocks']
                .every((css) => { const el = document.querySelector(css); return el && el.data; })"""),
                 timeout=20, what="the opened sections to draw")
        # distributions: per group with the slowest hosts apart, not sixteen hosts under one label
        names = driver.execute_script(
            "return document.querySelector('#distributions .histogram').data.map(t => t.name)")
        assert len(names) <= 8 and sum(n.endswith("(slow)") for n in names) == 3, names
        assert {n for n in names if not n.endswith("(slow)")} <= {"db (4 hosts)", "web (12 hosts)",
                                                                "db (3 hosts)", "web (11 hosts)",
                                                                "db (2 hosts)", "web (10 hosts)",
                                                                "web (9 hosts)", "db (1 hosts)"}, names
        heatmap = driver.execute_script("return document.querySelector('#heatmaps .plot').data[0].y")
        assert len(heatmap) < len(FLEET_HOSTS) and any(y.endswith("(busiest)") for y in heatmap), heatmap

        # expand a group on request: its hosts' rows, and the URL keeps it
        driver.find_element(By.CSS_SELECTOR, "#fold .expand[data-group='db']").click()
        expanded = lambda: driver.execute_script(  # noqa: E731
            "return document.getElementById('timeline').layout.yaxis.categoryarray")
        wait_for(lambda: "db-2/xdb2" in expanded(), timeout=10, what="the db group to expand")
        assert "web (12 hosts)" in expanded()
        assert "expand=db" in driver.current_url
        # Grafana's shared time range: zoom one panel, the others follow; the URL keeps it
        driver.execute_script(
            "Plotly.relayout(document.getElementById('timeline'), {'xaxis.range': [100, 900]})")
        wait_for(lambda: driver.execute_script("return document.getElementById('busy').layout.xaxis.range")
              == [100, 900], timeout=10, what="the CPU panel to follow the timeline's zoom")
        assert "x0=100" in driver.current_url and "x1=900" in driver.current_url
        driver.find_element(By.CSS_SELECTOR, "#event-filter input[name=text]").send_keys("span")
        driver.find_element(By.CSS_SELECTOR, "#event-filter button").click()
        wait_for(lambda: "text=span" in driver.current_url, timeout=10, what="the events' filter in the URL")
        saved = driver.current_url
        wait_for(lambda: driver.execute_script("return document.body.dataset.drawing") == "0", timeout=20,
                 what="the page's panels to be drawn before it is left")
        # a reload restores it all
        driver.get("about:blank")
        open_page(driver, saved, unfold=False)
        assert "db-2/xdb2" in expanded()
        assert driver.execute_script("return document.getElementById('clocks').layout.xaxis.range") \
            == [100, 900]
        text = driver.find_element(By.CSS_SELECTOR, "#event-filter input[name=text]")
        assert text.get_attribute("value") == "span"

        # hang triage: the missed deadline and the last sign of life lead, not the kill, and not in red
        hang = driver.find_element(By.CSS_SELECTOR, "#triage .failure.hang")
        lead = hang.find_element(By.CSS_SELECTOR, "h3").text
        assert lead == "db-2/xdb2 missed the deadline of step 5 (work): no ack within 1.5 s, need 15", lead
        life = hang.find_element(By.CSS_SELECTOR, ".life").text
        assert "its last event PLAY/tick tag 4, " in life and "before the deadline" in life, life
        # within the 1.5 s it had: the deadline counted once, from when it entered
        number, unit = re.search(r"tag 4, ([0-9.]+) (us|ms|s) before the deadline", life).groups()
        assert float(number) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[unit] <= 1.5, life
        assert "stdout xdb2 line 2, stderr xdb2 stderr in work" in life, life
        red = driver.execute_script(
            "return getComputedStyle(document.querySelector('#triage .failure.exception')).borderTopColor")
        assert driver.execute_script("return getComputedStyle(arguments[0]).borderTopColor", hang) != red
        # each component's output is offered for download, through checked names
        links = [a.get_attribute("href") for a in driver.find_elements(By.CSS_SELECTOR, "#component-files a")]
        stdout = next(h for h in links if h.endswith("/hosts/web-03/xweb03/stdout"))
        with urllib.request.urlopen(stdout, timeout=10) as response:
            assert b"xweb03 line 2" in response.read()
        assert any(h.endswith("/hosts/web-03/xweb03/files/xweb03.log") for h in links), links
        assert not (errors := console_errors(driver)), errors

        # its report.html: at most 2 MB (plotly.js and the panels' data packed), and it opens
        # from file:// with nothing fetched
        report = fleet_results / "runs" / ref / "merged" / "report.html"
        assert report.stat().st_size <= 2_000_000, report.stat().st_size
        open_page(driver, report.as_uri())
        assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
        assert driver.execute_script("return document.getElementById('timeline').data.length") > 1
        assert driver.find_elements(By.CSS_SELECTOR, "#distributions .ecdf .main-svg")
        assert not (errors := console_errors(driver)), errors


def test_report_gives_the_figures_of_each_phase_and_judges_a_trend_within_a_phase(fleet_results: Path):
    run = fleet_results / "runs" / run_ref(fleet_results, "browse-fleet")
    done = ns_control("report", str(run), cwd=fleet_results)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if "per phase" in line)
    warm = next(line for line in lines[first:] if " warm: " in line)
    assert "16/16 ok" in warm and "cpus" in warm and "B/s" in warm, warm
    spans = [line for line in lines[first:] if line.strip().startswith("PLAY/span:")]
    assert len(spans) == 2 and all("160 values" in line for line in spans), spans
    # ~1 ms spans in warm, ~4 ms in soak: a phase change, not a drift across the run
    assert not [line for line in lines if "PLAY/span: drifts" in line and "across the run" in line], \
        done.stdout



def test_a_campaign_says_which_direction_is_better_and_draws_a_geometric_sweep_on_a_log_axis_and_compare_draws_distributions(  # noqa: E501
        results: Path):
    [campaign] = (results / "runs" / "campaigns").glob("*/*")
    a, b = (run_ref(results, "browse-sweep", i) for i in (0, 3))
    with serving(results) as url, chromium() as driver:
        open_page(driver, f"{url}/campaign/{campaign.parent.name}/{campaign.name}")
        heads = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#matrix thead th")]
        assert any(h.startswith("interval to_client") and h.endswith("lower is better") for h in heads), heads
        # client.size 64 and 16384: a factor of 256, drawn on a log axis
        axis = driver.execute_script("return document.getElementById('line-1').layout.xaxis")
        assert axis["type"] == "log" and axis["title"]["text"] == "client.size (log)", axis
        assert not (errors := console_errors(driver)), errors

        open_page(driver, f"{url}/compare?a={a}&b={b}")
        drawn = driver.execute_script("""return [...document.querySelectorAll('#compare-distributions .ecdf')]
            .map((el) => [el.layout.title.text, el.data.map((t) => t.name + ':' + t.x.length)])""")
        assert ["interval to_client", ["a:101", "b:101"]] in drawn, drawn
        assert not (errors := console_errors(driver)), errors
