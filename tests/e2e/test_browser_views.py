"""The browser's pages as a demanding user reads them, in a real headless Chromium over real
runs: at 1400 and 800 px wide and after a resize, every plot keeps its height and nothing
spills; heatmaps run light to dark with colour bars whose labels fit; every number reads as
people write it; every step is named over the timeline; exit statuses, ack messages,
warnings and the causality check are on the page; the events filter is one on the served
page and in report.html, which says what sample of the events it carries; a campaign's cells
are in one unit; compare decides on the medians it shows; and a run watched live, with a
participant killed at its deadline and a background command, is followed until it ends."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from browser import chromium, console_errors, open_page, run_ref, serving
from netspec.analysis.provenance import host_facts
from netspec.analysis.resultset import open_tables, read_summary
from netspec.protocol.runrecord import read_run
from netspec.web import eventtable, timeline
from netspec.web.compare import NO_TEST, median_test
from selenium.webdriver.common.by import By
from support import PROGRAMS, start_run, wait_for

pytestmark = pytest.mark.e2e

# Each plot's container as tall as its figure, its drawing inside it; the page no wider than
# the window; every step's name over the timeline, no two overlapping.
LAYOUT = """
const boxes = (els) => [...els].map((e) => {
  const r = e.getBoundingClientRect();
  return {l: r.left, r: r.right, t: r.top, b: r.bottom, text: e.textContent};
});
const meet = (a, b) => a.l < b.r - 0.5 && b.l < a.r - 0.5 && a.t < b.b - 0.5 && b.t < a.b - 0.5;
const overlaps = (bs) => bs.flatMap((a, i) => bs.slice(i + 1).filter((b) => meet(a, b))
                                                   .map((b) => [a.text, b.text]));
const text = boxes(document.querySelectorAll('main table, main h2, main h3, main p, main form'));
const plots = [...document.querySelectorAll('.plot')].filter((p) => p.layout).map((p) => {
  const svg = p.querySelector('.main-svg').getBoundingClientRect(), box = p.getBoundingClientRect();
  const [me] = boxes([p]);
  return {id: p.id, height: box.height, figure: p._fullLayout.height,
          spills: svg.bottom > box.bottom + 1 || svg.right > box.right + 1 || text.some((t) => meet(me, t))};
});
return {plots, wide: document.documentElement.scrollWidth - document.documentElement.clientWidth,
        names: boxes(document.querySelectorAll('#timeline .annotation')).map((b) => b.text),
        nameOverlaps: overlaps(boxes(document.querySelectorAll('#timeline .annotation'))),
        colourBars: [...document.querySelectorAll('#heatmaps .plot')].map((p) => overlaps(boxes(
          p.querySelectorAll('.colorbar .cbaxis text, .colorbar .ytick text')))),
        timelineWidth: document.getElementById('timeline').getBoundingClientRect().width};
"""
WIDER = "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
# Each heatmap's colour scale as drawn: the luminance of its lowest and of its highest colour.
HEAT = """
const channels = (c) => c.startsWith('#') ? [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16))
                                          : c.match(/[\\d.]+/g).map(Number);
const lum = (c) => { const [r, g, b] = channels(c); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
return [...document.querySelectorAll('#heatmaps .plot')].map((p) => {
  const t = p._fullData[0], scale = t.reversescale ? [...t.colorscale].reverse() : t.colorscale;
  return [lum(scale[0][1]), lum(scale[scale.length - 1][1])];
});
"""


def _check_layout(driver, steps: int, width: int) -> None:
    seen = driver.execute_script(LAYOUT)
    assert seen["wide"] <= 0, f"at {width} px the page is {seen['wide']} px wider than the window"
    for p in seen["plots"]:
        assert abs(p["height"] - p["figure"]) <= 1 and p["height"] > 100, (width, p)
        assert not p["spills"], (width, p)
    assert len(seen["names"]) == steps, (width, seen["names"])
    assert not seen["nameOverlaps"], (width, seen["nameOverlaps"])
    assert not any(seen["colourBars"]), (width, seen["colourBars"])


def _resized(driver, width: int, before: float) -> None:
    driver.set_window_size(width, 1800)
    wait_for(lambda: driver.execute_script(
        "return document.getElementById('timeline').getBoundingClientRect().width") != before,
        timeout=10, what=f"the timeline to take the window's {width} px")
    # the page redraws on a resize after a short quiet spell: wait until two looks agree
    last: list = []
    wait_for(lambda: last.append(driver.execute_script(LAYOUT)) or (len(last) > 1 and last[-1] == last[-2]),
             timeout=10, what="the page to settle after the resize")


def test_a_run_page_keeps_its_layout_at_1400_and_800_px_and_after_a_resize_and_says_what_the_run_did(
        results: Path, tmp_path: Path):
    ok = run_ref(results, "browse-ok")
    record = read_run(results / "runs" / ok)
    steps = len(record.steps)
    with serving(results) as url, chromium() as driver:
        open_page(driver, f"{url}/run/{ok}")
        _check_layout(driver, steps, 1400)
        for width in (800, 1400):
            _resized(driver, width, driver.execute_script(LAYOUT)["timelineWidth"])
            driver.save_screenshot(str(tmp_path / f"run-{width}.png"))
            _check_layout(driver, steps, width)

        # the busiest cell is the darkest: each scale runs from light to dark
        for low, high in driver.execute_script(HEAT):
            assert low > high + 100, (low, high)
        text = driver.find_element(By.TAG_NAME, "main").text
        assert not re.search(r"\de[+-]\d", text), re.findall(r"\S*\de[+-]\d\S*", text)
        heading = driver.find_element(By.CSS_SELECTOR, "#distributions h3").text
        assert re.search(r"p50 [\d.]+ (ns|us|ms|s), p99 [\d.]+ (ns|us|ms|s)", heading), heading
        # exit statuses, the acks' messages, warnings, the causality check
        exits = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#exits tbody tr")]
        assert [e.split()[:2] for e in exits] == [["a/server", "0"], ["b/client", "0"]], exits
        messages = driver.find_element(By.ID, "steps").text
        assert re.search(r"b/client: 300 round trips: median [\d.]+ us", messages), messages
        warnings = driver.find_element(By.ID, "warnings").text
        said = read_summary(results / "runs" / ok / "merged").warnings
        assert said and all(w in warnings for w in said), (said, warnings)
        causality = [r.text for r in driver.find_elements(By.CSS_SELECTOR, "#causality-check tbody tr")]
        assert [c.split()[:2] for c in causality] == [["to_server", "300"], ["to_client", "300"]], causality
        caveats = driver.find_element(By.ID, "resource-caveats").text
        assert "the CPU figure of each is of the machine they share" in caveats, caveats
        # no host is drawn busier than it has CPUs (a cell measured above is capped, and said)
        cpus = max(f.cpu_count for f in host_facts(results / "runs" / ok, record.host_names).values())
        drawn = driver.execute_script("""return [...document.querySelectorAll('#heatmaps .plot')]
            .filter((p) => p.layout.title.text.startsWith('CPU')).flatMap((p) => p.data[0].z.flat())""")
        assert drawn and max(v for v in drawn if v is not None) <= cpus, (drawn, cpus)
        assert not console_errors(driver)


FILTERS = [{"entity": "STIM/*"}, {"entity": "rtt"}, {"entity": "stim/RTT"}, {"text": "rtt"},
           {"host": "b", "text": "300"}]


def _filtered(driver, query: dict[str, str]) -> str:
    """How many events the page's filter finds for `query` (its form filled, then sent)."""
    driver.execute_script("""const form = document.getElementById('event-filter');
        for (const field of form.elements) if (field.name) field.value = arguments[0][field.name] || '';
        document.getElementById('events-page').textContent = '';""", query)
    driver.find_element(By.CSS_SELECTOR, "#event-filter button").click()
    wait_for(lambda: time.sleep(0.05) or driver.execute_script(
        "return document.getElementById('events-page').textContent"), timeout=10,
             what=f"the events filtered by {query}")
    page = driver.find_element(By.ID, "events-page").text
    return "0" if page.startswith("no events match") else page.split(" of ")[1].split()[0]


def test_the_events_filter_is_one_on_the_served_page_and_in_a_report_which_says_what_it_carries(
        results: Path, tmp_path: Path):
    ok = run_ref(results, "browse-ok")
    run = results / "runs" / ok
    # a report's share of the events is a sample: the first of each host's each kind of
    # record, and it says so (its pager shows what `sample` says)
    record = read_run(run)
    db = open_tables(run / "merged")
    try:
        groups = db.execute("""SELECT host, stream, kind, count(*) FROM events WHERE kind != 'admin'
                               GROUP BY ALL""").fetchall()
        total = sum(n for *_, n in groups)
        sample = eventtable.events_sample(db, timeline.origin_ns(record), 100)
    finally:
        db.close()
    carried = {(r["host"], r["kind"]) for r in sample["rows"]}
    assert len(sample["rows"]) <= 100 and sample["total"] == total > 100
    assert carried == {(h, k) for h, _, k, _ in groups}, "every host's every kind of record is carried"
    said = sample["sample"]
    assert said.startswith("the first ") and f"its {len(groups)} kinds of record" in said, said
    with serving(results) as url, chromium() as driver:
        open_page(driver, f"{url}/run/{ok}")
        served = [_filtered(driver, q) for q in FILTERS]
        open_page(driver, (run / "merged" / "report.html").as_uri())
        driver.save_screenshot(str(tmp_path / "report.png"))
        assert f"of the {total} this report carries of the run's {total}: all of them" in \
            driver.find_element(By.ID, "events-page").text
        reported = [_filtered(driver, q) for q in FILTERS]
        assert not console_errors(driver)
    assert served == reported, list(zip(FILTERS, served, reported, strict=True))
    # an entity is matched whole (case aside): "rtt" is no entity's name, "stim/RTT" is one's
    assert served[1] == "0" and int(served[2]) > 0 and int(served[0]) > 0 and int(served[3]) > 0, served


def test_a_campaigns_cells_are_each_in_one_unit_and_compare_decides_on_the_medians_it_shows(results: Path):
    with serving(results) as url, chromium() as driver:
        driver.set_window_size(800, 1800)
        [campaign] = (results / "runs" / "campaigns").glob("*/*")
        open_page(driver, f"{url}/campaign/{campaign.parent.name}/{campaign.name}")
        cells = [c.text for c in driver.find_elements(By.CSS_SELECTOR, "#matrix td.cell")]
        assert cells
        for cell in cells:
            m = re.fullmatch(r"([\d.,]+) (\S+) \[([\d.,-]+), ([\d.,-]+)\] (\S+) n=\d+", cell)
            assert m and m[2] == m[5], cell
            low, mean, high = (float(m[i].replace(",", "")) for i in (3, 1, 4))
            assert low <= mean <= high, cell
        assert driver.execute_script(WIDER) <= 0, "the campaign page is wider than 800 px"
        a, b = run_ref(results, "browse-sweep", 0), run_ref(results, "browse-sweep", 1)
        open_page(driver, f"{url}/compare?a={a}&b={b}")
        assert "Mann-Whitney U" in driver.find_element(By.ID, "metrics-method").text
        assert driver.execute_script(WIDER) <= 0, "the compare page is wider than 800 px"
        for row in driver.find_elements(By.CSS_SELECTOR, "#compare-metrics tr.metric"):
            pct, interval, verdict = (row.find_elements(By.TAG_NAME, "td")[i].text for i in (4, 5, 6))
            # the median moved the way the verdict says, and its interval excludes 0 that side
            # (a median of 0 in a has no %)
            if not interval:  # a metric a short run sampled once: no test, and it says so
                assert verdict == NO_TEST, (interval, verdict)
                continue
            bounds = re.match(r"\[(-?[\d.,]+), (-?[\d.,]+)\]", interval)
            low, high = (float(v.replace(",", "")) for v in bounds.groups())
            if verdict.startswith("higher"):
                assert pct.startswith("+") or pct == "-", (pct, verdict)
                assert low > 0, (interval, verdict)
            if verdict.startswith("lower"):
                assert pct.startswith("-"), (pct, verdict)
                assert high < 0, (interval, verdict)
        assert not console_errors(driver)


def test_a_latency_whose_median_rose_is_never_lower_for_one_stall_in_the_baseline():
    # the case: a's median 17.6 us with one 95 ms stall, b's median six times higher
    rng = np.random.default_rng(1)
    a = np.append(rng.normal(17.6, 1.0, 300), 95_000.0)
    b = rng.normal(105.0, 5.0, 300)
    m = median_test(a, b)
    assert m is not None and m.verdict == "higher" and m.pct > 400 and m.low > 0
    assert median_test(a, a.copy()).verdict == "same"


LIVE = """
experiment: live
hosts: {a: {}, b: {}}
components:
  one: {host: a, program: ACTOR, args: ["launch,work,collect"], params: {hang_in: work}}
  two: {host: b, program: ACTOR, args: ["launch,work,collect"], params: {ticks: 5}}
  idle: {host: b, command: "sleep 60", stop: stop_logging}
  gate: {host: a, program: WAITER, args: ["before,after"], params: {dir: HOLD}}
services: {clksync: {reference: a}}
streams: {play: {enable: [PLAY]}}
schedule: [launch, sync_clocks, start_logging, {phase: before, components: [gate]},
           {phase: work, components: [one, two], need: 1, deadline: 2s},
           {phase: after, components: [gate]}, stop_logging, collect]
"""


def test_a_run_watched_live_is_followed_until_it_ends_with_a_participant_killed_at_its_deadline(
        experiment, tmp_path: Path):
    hold = tmp_path / "hold"  # the gate holds the run in 'before' and 'after' until the test lets it go
    hold.mkdir()
    path = experiment(LIVE.replace("WAITER", str(PROGRAMS / "waiter.py")).replace("HOLD", str(hold)))
    with serving(tmp_path) as url, chromium() as driver:
        proc, _ = start_run(path, tmp_path, lambda r: (hold / "before.in").exists() and r,
                            "the run to hold in phase 'before'")
        try:
            ref = run_ref(tmp_path, "live")
            open_page(driver, f"{url}/run/{ref}", unfold=False)
            assert driver.find_element(By.ID, "run-status").text == "running"
            steps = driver.execute_script("return document.querySelector('#steps tbody').textContent")
            assert "work" not in steps, steps
            # the page polls and draws the steps as they come, here 'work' while the run holds in 'after'
            # (looked at four times a second: a page asked more often draws nothing new)
            (hold / "before.go").touch()
            wait_for(lambda: time.sleep(0.25) or driver.execute_script(
                "return Number(document.body.dataset.polls || 0) >= 1 && "
                "document.querySelector('#steps tbody').textContent.includes('work')"),
                timeout=60, what="the live page to draw the step it did not have")
            (hold / "after.go").touch()
            proc.communicate(timeout=90)
            # ... and reloads once the run ended and its result set is made
            wait_for(lambda: time.sleep(0.25) or driver.execute_script(
                "return document.body.dataset.ready === 'yes' && !document.getElementById('not-merged') && "
                "document.getElementById('run-status').textContent !== 'running'"),
                timeout=60, what="the page to reload on the ended, merged run")
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.communicate(timeout=60)
        assert driver.find_element(By.ID, "run-status").text == "partial"
        drawn = driver.execute_script("""const d = document.getElementById('timeline').data;
            return Object.fromEntries(d.filter(t => t.type === 'bar').map(t => [t.name, [t.y, t.x]]))""")
        triage = driver.execute_script("return document.getElementById('triage').textContent")
        exits = driver.execute_script("return document.getElementById('exits').textContent")
        # (Chromium fails a request under way when the machine's interfaces change: another
        # suite's namespaced hosts coming and going, not this page's doing)
        assert not [e for e in console_errors(driver) if "ERR_NETWORK_CHANGED" not in e]
    # killed at its 2 s deadline: its bar runs to the deadline, its triage says so
    rows, widths = drawn["killed"]
    assert rows == ["a/one"] and 1900 <= widths[0] <= 2100, drawn["killed"]
    assert "a/one missed the deadline of step 4 (work)" in triage, triage
    assert "no ack within the deadline of 2 s" in triage, triage
    # the background command: a bar over its process's life, from launch to its SIGTERM (at
    # stop_logging), not the tick of its launch's ack
    [row], [life] = drawn["background command's lifetime"]
    ran = read_run(tmp_path / "runs" / ref).components["b/idle"].duration_s * 1e3
    ticks = [w for r, w in zip(*drawn["ok"], strict=True) if r == "b/idle"]
    assert row == "b/idle" and abs(life - ran) < 1 and life > max(ticks), (drawn, ran)
    assert "b/idle" in exits and "killed by signal 15" in exits, exits
