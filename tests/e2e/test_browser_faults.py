"""The faults in the browser, on real runs (tests/browser.py's FAULTS and OUTSIDE): each fault
a marker on the timeline and a row of the faults table with its recovery, the step a
scheduled kill ended a bar of its own, the outage on the operations panel, and a component
SIGKILLed from outside named among the failed with its signal (it once read "Failed: none")."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import chromium, console_errors, open_page, run_ref, serving
from selenium.webdriver.common.by import By

pytestmark = pytest.mark.e2e


def test_faults_show_on_the_timeline_in_their_table_and_beside_the_operations(faults_results: Path,
                                                                              tmp_path: Path):
    with serving(faults_results) as url, chromium() as driver:
        open_page(driver, f"{url}/run/{run_ref(faults_results, 'browse-faults')}")
        driver.save_screenshot(str(tmp_path / "faults.png"))
        rows = driver.find_elements(By.CSS_SELECTOR, "#faults tbody tr")
        cells = [[td.text for td in row.find_elements(By.TAG_NAME, "td")] for row in rows]
        assert [c[1] for c in cells] == ["pause server", "kill hold"]
        pause, kill = cells
        assert pause[5].startswith("seen stopped (T) in /proc") and pause[6].endswith("after")
        assert pause[7].startswith("first success "), pause  # the operations answered again
        assert kill[5].startswith("it was killed by SIGKILL")
        traces = driver.execute_script("""return document.getElementById('timeline').data
            .map(t => ({name: t.name, y: t.y, hover: t.hovertext}))""")
        by_name = {t["name"]: t for t in traces}
        markers = by_name["fault"]
        assert markers["y"] == ["a/server", "a/hold"]
        assert markers["hover"][0].startswith("fault 0 pause server (host a, at open+0.5s): done")
        assert "a/server" in by_name["fault, to its end"]["y"]  # the pause's 300 ms
        assert by_name["killed by schedule"]["y"] == ["a/hold"]  # the cut step's bar, ended by the kill
        shapes = driver.execute_script("""return document.getElementById('operations').layout.shapes
            .map(s => ({type: s.type, dash: s.line && s.line.dash, fill: s.fillcolor}))""")
        assert sum(s["type"] == "line" and s["dash"] == "dot" for s in shapes) == 2  # each fault's instant
        outages = [s for s in shapes if s["type"] == "rect" and (s["fill"] or "").startswith("rgba(228,87")]
        assert outages  # the pause's, to the first success asked after it
        assert not console_errors(driver)


def test_a_component_killed_from_outside_is_named_failed_with_its_signal(faults_results: Path):
    with serving(faults_results) as url, chromium() as driver:
        open_page(driver, f"{url}/run/{run_ref(faults_results, 'browse-outside')}")
        failed = driver.find_element(By.ID, "failed-list").text
        assert "a/victim died in cut (step 1): was killed by SIGKILL, no one asked it to end" in failed
        assert not console_errors(driver)
