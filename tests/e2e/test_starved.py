"""A component starved of CPU, for real: pinned to one CPU beside a hog pinned there too
(stress-ng, bounded), it burns a fixed amount of CPU in phase `work`. The merge, the report
and a campaign that refuses starved runs say so, and the wait the merge measured is the
kernel's own figure for the component over its callback (its /proc/self/schedstat)."""

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from netspec.analysis.phases import run_phase_lines
from netspec.controller.campaigns.campaign import CampaignDir, starved_lines
from netspec.protocol.campaignrecord import read_campaign
from netspec.protocol.exits import children
from support import PROGRAMS, ns_control, wait_for

HOGS = 3  # on the component's CPU: it gets about a quarter of it

pytestmark = pytest.mark.skipif(not (shutil.which("stress-ng") and shutil.which("taskset")),
                                reason="needs stress-ng and taskset to starve a component")


@pytest.fixture
def hog():
    """HOGS busy workers pinned to CPU 0 for at most 90 s, ended after the test."""
    proc = subprocess.Popen(["taskset", "-c", "0", "stress-ng", "--cpu", str(HOGS), "--timeout", "90s",
                             "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Its workers at work before the run starts (on a loaded machine they take a while to fork).
    wait_for(lambda: len(children(proc.pid)) >= HOGS, timeout=20, what=f"{HOGS} stress-ng workers")
    yield proc
    proc.terminate()
    proc.wait(timeout=10)


def test_a_component_pinned_beside_a_hog_is_said_starved_by_the_kernels_own_wait_and_its_campaign_refuses_it(
        hog, experiment, tmp_path):
    path = experiment(textwrap.dedent(f"""\
        experiment: starved
        components:
          burner: {{program: {PROGRAMS / "burner.py"}, params: {{cpu: 0, burn_ms: 150}}}}
        services: {{camp: {{interval_ms: 20}}}}
        schedule: [launch, start_logging, work, stop_logging, collect]
        sweep: {{params: {{burner.burn_ms: [150]}}}}
        repeat: {{runs: 1, refuse_starved: true}}
        """))
    done = ns_control("run", str(path), cwd=tmp_path, timeout=180)
    assert hog.poll() is None, "the hog ended before the run did"
    (state_file,) = (tmp_path / "runs" / "campaigns").glob("*/*/campaign.json")
    state = read_campaign(state_file.parent)
    ((run,),) = [p.runs for p in state.points]
    assert run.status == "ok" and not run.counted, done.stdout + done.stderr
    assert done.returncode == 1 and "(refuse_starved)" in done.stderr, done.stdout + done.stderr
    summary = json.loads((Path(run.path) / "merged" / "summary.json").read_text())
    (starved,) = [s for s in summary["starved"] if s["phase"] == "work"]
    assert starved["host"] == "local" and starved["component"] == "burner"
    waited, ran, wall = map(int, (Path(run.path) / "hosts/local/burner/stdout").read_text().split()[1:4])
    # The hog took a quarter of the CPU from it or more (the kernel's own count): starved by
    # the rule the merge applies (analysis/starved.py), whatever share the scheduler gave.
    assert waited >= wall / 4, (waited, ran, wall)
    # The step spans the callback and its enter and ack, each a wait for the CPU too; the
    # kernel adds a wait to the count when it ends, so a sample amid one reads it late.
    assert abs(starved["waited_ns"] - waited) <= 0.15 * waited + 50e6, (starved, waited)
    assert abs(starved["ran_ns"] - ran) <= 0.15 * ran + 20e6, (starved, ran)
    assert run.starved == [text for text in summary["warnings"] if "starved of CPU in step" in text]
    assert f"warning: {run.starved[0]}" in done.stdout + done.stderr
    # What `ns_control report` prints of the run, and of its campaign (in this process: each
    # command would take seconds to import what reports).
    assert f"      STARVED: {run.starved[0]}" in run_phase_lines(Path(run.path) / "merged", run.id)
    assert starved_lines(CampaignDir.open(Path(state_file).parent)) == [
        f"burner.burn_ms=150: run {run.id} not counted, starved of CPU: {run.starved[0]}"]
