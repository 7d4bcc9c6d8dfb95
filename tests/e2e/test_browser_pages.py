"""The browser as a person sees it, in a real headless Chromium: the index after real runs, a
run's page, a failed run's triage, a campaign's matrix and a report opened from file://, each
drawn without a console error. Screenshots land in the test's temporary directory."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from browser import chromium, console_errors, open_page, run_ref, serving
from netspec.protocol.runrecord import read_run
from selenium.webdriver.common.by import By

pytestmark = pytest.mark.e2e


def test_the_index_run_and_campaign_pages_show_what_the_runs_did(results: Path, tmp_path: Path):
    ok = run_ref(results, "browse-ok")
    record = read_run(results / "runs" / ok)
    with serving(results) as url, chromium() as driver:
        open_page(driver, url + "/")
        driver.save_screenshot(str(tmp_path / "index.png"))
        rows = driver.find_elements(By.CSS_SELECTOR, "#runs tbody tr.run")
        assert len(rows) == 6
        statuses = {r.get_attribute("data-experiment"): r.find_element(By.CSS_SELECTOR, ".status")
                    for r in rows}
        assert statuses["browse-failing"].text == "failed"
        assert "failed" in statuses["browse-failing"].get_attribute("class")
        driver.find_element(By.ID, "filter").send_keys("failing")
        assert [r.is_displayed() for r in rows].count(True) == 1
        assert not console_errors(driver)

        open_page(driver, f"{url}/run/{ok}")
        driver.save_screenshot(str(tmp_path / "run.png"))
        # one bar per step and participant, as run.json has them
        drawn = driver.execute_script("""return document.getElementById('timeline').data
            .filter(t => t.type === 'bar').reduce((n, t) => n + t.y.length, 0)""")
        assert drawn == sum(len(s.participants()) for s in record.steps)
        assert len(driver.find_elements(By.CSS_SELECTOR, "#steps tbody tr")) == len(record.steps)
        assert driver.find_elements(By.CSS_SELECTOR, "#distributions .histogram .main-svg")
        assert driver.find_elements(By.CSS_SELECTOR, "#clocks .main-svg")
        assert "of" in driver.find_element(By.ID, "events-page").text
        assert not console_errors(driver)

        [campaign] = (results / "runs" / "campaigns").glob("*/*")
        open_page(driver, f"{url}/campaign/{campaign.parent.name}/{campaign.name}")
        driver.save_screenshot(str(tmp_path / "campaign.png"))
        points = driver.find_elements(By.CSS_SELECTOR, "#matrix tbody tr.point")
        assert [p.get_attribute("data-label") for p in points] == ["client.size=64", "client.size=16384"]
        driver.find_element(By.CSS_SELECTOR, ".open-runs").click()
        assert len(driver.find_elements(By.CSS_SELECTOR, "#runs-1 li a")) == 2
        assert not console_errors(driver)


def test_a_failed_runs_page_marks_the_step_and_shows_its_triage(results: Path, tmp_path: Path):
    failing = run_ref(results, "browse-failing")
    with serving(results) as url, chromium() as driver:
        open_page(driver, f"{url}/run/{failing}")
        driver.save_screenshot(str(tmp_path / "failed.png"))
        failed_rows = driver.find_elements(By.CSS_SELECTOR, "#steps tbody tr.failed")
        assert [r.find_elements(By.TAG_NAME, "td")[1].text for r in failed_rows] == ["work"]
        marked = driver.execute_script("""return document.getElementById('timeline').layout.annotations
            .map(a => a.text)""")
        assert "work ✕" in marked
        triage = driver.find_element(By.ID, "triage")
        assert "b/w2 error in work" in triage.text
        assert "RuntimeError: w2 fails in work as asked" in triage.text
        assert "w2 line 39" in triage.find_element(By.CSS_SELECTOR, "pre.stdout").text
        hosts = [r.find_element(By.TAG_NAME, "td").text for r in triage.find_elements(By.CSS_SELECTOR,
                                                                                     "table.around tbody tr")]
        assert hosts == ["a", "b", "c"]
        assert not console_errors(driver)


def test_a_report_opens_from_a_file_and_fetches_nothing(results: Path, tmp_path: Path):
    report = results / "runs" / run_ref(results, "browse-ok") / "merged" / "report.html"
    with chromium() as driver:
        open_page(driver, report.as_uri())
        driver.save_screenshot(str(tmp_path / "report.png"))
        fetched = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)")
        assert all(name.startswith(("file:", "data:")) for name in fetched), fetched
        assert driver.find_elements(By.CSS_SELECTOR, "#timeline .main-svg")
        assert driver.find_elements(By.CSS_SELECTOR, "#distributions .ecdf .main-svg")
        driver.find_element(By.CSS_SELECTOR, "#event-filter input[name=text]").send_keys("STIM/rtt")
        driver.find_element(By.CSS_SELECTOR, "#event-filter button").click()
        assert "STIM/rtt" in driver.find_element(By.ID, "events").text
        assert not console_errors(driver)


def test_serve_open_with_no_browser_to_open_says_so_and_serves(tmp_path: Path):
    # BROWSER names a command that fails: webbrowser finds no browser to open the page in
    env = {**os.environ, "BROWSER": "false"}
    env.pop("DISPLAY", None)
    proc = subprocess.Popen([sys.executable, "-m", "netspec.controller.cli", "serve", "--open", "--port", "0",
                             "--runs", str(tmp_path / "runs")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        said = b""
        # both lines are said before it serves: a deadline for a busy machine's imports, not a bound
        deadline = time.monotonic() + 60
        while said.count(b"\n") < 2 and time.monotonic() < deadline:
            if select.select([proc.stdout], [], [], 0.2)[0]:
                said += os.read(proc.stdout.fileno(), 4096)
        first, second, *_ = [*said.decode().splitlines(keepends=True), "", ""]
        url = first.split()[3]
        assert first.startswith("netspec results browser: http://127.0.0.1:"), first
        assert second == f"note: no browser to open here (--open); open {url} in one\n", second
        assert urllib.request.urlopen(url, timeout=10).status == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
