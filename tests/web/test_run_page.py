"""The run page's first screen from a run's record: what it says while a finished run merges,
which "took" is which, and the slow participants it names."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket

from netspec.protocol.runrecord import decode, process_start, read_run
from netspec.web import fleet, pages
from netspec.web.pages import render, run_header
from support import REPO

RUN = REPO / "tests" / "data" / "runs" / "stimulus-response" / "20261121T181343Z-23d1a4"
MS = 1_000_000


def page_of(run) -> str:
    record = read_run(run)
    return render("run.html", title="run", **run_header(run, record, f"x/{record.id}", []))


def test_a_finished_run_its_controller_merges_says_it_is_merging_not_to_fetch(tmp_path):
    run = tmp_path / RUN.name
    shutil.copytree(RUN, run)
    record = json.loads((run / "run.json").read_text())
    # this process is the run's controller, alive and still making its result set
    record["controller"] = {"host": socket.gethostname(), "pid": os.getpid(),
                            "pid_started": process_start(os.getpid())}
    (run / "run.json").write_text(json.dumps(record))
    page = page_of(run)
    assert "is\nmerging it now" in page and "no <code>ns_control fetch</code> needed" in page, page
    assert f"need <code>ns_control fetch {record['id']}</code>" not in page


def test_a_finished_run_nobody_merges_says_to_fetch_it(tmp_path):
    page = page_of(RUN)
    assert "need <code>ns_control fetch 20261121T181343Z-23d1a4</code>" in page
    assert "merging it now" not in page


def test_the_page_says_which_took_is_which_and_what_the_timeline_spans():
    page = page_of(RUN)
    record = read_run(RUN)
    span = fleet.overview(record)["span"]
    assert f"(its steps' participants span {span} of it on the timeline)" in page, page
    assert 'which "took" is which' in page and "from sending the step to\nits last ack received" in page


def test_an_underflowed_p_value_is_said_as_a_bound():
    said = (pages.p_text(0.0), pages.p_text(3e-320), pages.p_text(0.0312))
    assert said == ("p < 1e-300", "p < 1e-300", "p=0.031")


def fleet_record(steps: dict[str, list[float]]):
    """A run record with a step per phase of `steps`, its participant x on host web-<i>
    having taken the i-th of its list's milliseconds."""
    base = json.loads((RUN / "run.json").read_text())
    n = max(len(t) for t in steps.values())
    base["hosts"] = {f"web-{i}": {"address": "127.0.0.1:1"} for i in range(n)}
    base["plan"] = None
    base["steps"] = [{"phase": phase, "status": "ok", "hosts": {
        f"web-{i}": {"components": {"x": {"status": "ok", "entered_ns": 10**18,
                                          "acked_ns": 10**18 + int(ms * MS)}}}
        for i, ms in enumerate(took)}} for phase, took in steps.items()]
    return decode(json.dumps(base).encode(), "run.json")


def test_the_slowest_named_are_those_most_over_their_steps_median_not_the_highest_ratios():
    # blips of 26 ms over a 1 ms median (26x) in one step; in another, web-137 a second late over 400 ms (3x)
    blips = [26.0 if i % 30 == 0 else 1.0 for i in range(300)]
    work = [1200.0 if i == 137 else 400.0 + i % 7 for i in range(300)]
    slow = fleet.overview(fleet_record({"warm": blips, "work": work}))["slow"]
    assert slow[0]["row"] == "web-137/x" and slow[0]["over"] == "797 ms", slow
    assert slow[0]["median"] == "403 ms"


def test_a_wide_step_at_1000_hosts_names_no_one_slow_but_its_far_out():
    # a thousand hosts spread from 10 to 70 ms (the median 25 ms): a spread, no outlier; and one at 3 s
    took = [20 * (0.5 + 3 * (i / 1000) ** 2) for i in range(1000)]
    random.Random(1).shuffle(took)
    o = fleet.overview(fleet_record({"work": took}))
    assert o["slow"] == [] and o["slow_more"] == 0, o["slow"]
    took[400] = 3000.0
    o = fleet.overview(fleet_record({"work": took}))
    assert [s["row"] for s in o["slow"]] == ["web-400/x"] and o["slow_more"] == 0, o["slow"]
