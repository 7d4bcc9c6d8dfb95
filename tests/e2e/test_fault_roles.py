"""End to end: faults aimed at a role that real programs claim (nodelib.claim) as the run
goes, each taking the component that held it at its instant, the choice and its claim's
instant recorded; one aimed at a role nobody holds then is not done, and the run is partial,
naming it. On two local daemons: a claim crosses from a program to its daemon to the
controller, as on any host."""

import pytest
from netspec.protocol.runrecord import read_run
from support import PROGRAMS, ns_control

pytestmark = pytest.mark.e2e

CLAIMER = PROGRAMS / "claimer.py"
ROLES = f"""\
experiment: roles
hosts: {{local: {{}}, b: {{}}}}
components:
  first: {{host: local, program: {CLAIMER},
          params: {{hold_s: 1.8, claims: [[0.1, leader, true]]}}}}
  second: {{host: b, program: {CLAIMER},
           params: {{hold_s: 1.8, claims: [[0.3, leader, true]]}}}}
  third: {{host: local, program: {CLAIMER},
          params: {{hold_s: 1.8, claims: [[0.1, spare, true], [0.2, spare, false]]}}}}
schedule: [launch, sync_clocks, work, collect]
faults:
  - {{pause: {{role: leader}}, at: {{phase: work, after: 700ms}}}}
  - {{resume: {{role: leader}}, at: {{phase: work, after: 1000ms}}}}
  - {{kill: {{role: leader}}, at: {{phase: work, after: 1300ms}}}}
  - {{kill: {{role: spare}}, at: {{phase: work, after: 1300ms}}}}
"""
CLAIM_SEEN_NS = 5_000_000  # the claim's instant against the program's own stamp just before it


def test_a_fault_aimed_at_a_role_takes_its_holder_at_its_instant_and_records_the_choice(tmp_path):
    path = tmp_path / "roles.yaml"
    path.write_text(ROLES)
    run = ns_control("run", str(path), "--no-merge", cwd=tmp_path)
    record = read_run(tmp_path / "runs" / "latest")
    pause, resume, kill, vacant = record.faults
    stamped = {line.split()[1]: int(line.split()[0]) for line in
               (tmp_path / "runs" / "latest" / "hosts" / "b" / "second" / "stdout").read_text().splitlines()}
    # second's claim came after first's: every leader fault took second, on host b
    for fault in (pause, resume, kill):
        assert (fault.role, fault.target, fault.host) == ("leader", "second", "b") and not fault.error, fault
        assert 0 <= fault.claimed_ns - stamped["leader"] < CLAIM_SEEN_NS, (fault, stamped)
    assert "stopped (T)" in pause.effect and "running again" in resume.effect, (pause, resume)
    assert record.components["b/second"].scheduled and not record.components["local/first"].scheduled
    assert "fault 0 pause of role 'leader': aimed at second (host b), its claim" in run.stdout
    # third let 'spare' go before the fault's instant: nobody held it, and the run says so
    assert vacant.role == "spare" and vacant.done_ns is None and vacant.claimed_ns is None, vacant
    assert "no component held role 'spare' as its instant came" in vacant.error
    assert record.status == "partial" and run.returncode != 0, run.stdout + run.stderr
    assert "fault 3 kill ? (host ?, at work+1.3s, role spare): not done: no component held role 'spare'" \
        in run.stdout
