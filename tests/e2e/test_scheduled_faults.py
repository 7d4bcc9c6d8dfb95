"""End to end: a schedule's faults done by real daemons to real processes, each fault's instant
and effect checked against what the machine did (the process's exit, its own ticks, the
kernel's accounting), and the run's outcome with them."""

import os
import sys

import psutil
import pytest
from netspec.analysis.faultaudit import fault_lines
from netspec.datastream.reader import StreamReader
from netspec.protocol.exits import KILLED, run_processes
from netspec.protocol.runrecord import read_run
from support import ns_control

pytestmark = pytest.mark.e2e

TICKER = "import time\\nwhile True: print(time.time_ns(), flush=True); time.sleep(0.002)"
FAULTS = f"""\
experiment: faults
hosts: {{local: {{}}, b: {{}}}}
components:
  killed: {{host: local, command: [sleep, "30"], start: launch, stop: after}}
  terminated: {{host: local, command: [sleep, "30"], start: launch, stop: after}}
  paused: {{host: local, command: [{sys.executable}, -c, "{TICKER}"], start: launch, stop: after}}
  awaited: {{host: local, command: [sleep, "30"], start: work}}
  restarted: {{host: local, command: "echo started $$; exec sleep 30", start: launch, stop: after}}
  waiter: {{host: local, command: [sleep, "1.2"], start: work}}
  leaves: {{host: b, command: [sleep, "30"], start: launch, stop: after}}
schedule:
  - launch
  - sync_clocks
  - {{phase: work, need: 1}}
  - start_logging
  - after
  - collect
faults:
  - {{kill: killed, at: {{phase: work, after: 200ms}}}}
  - {{pause: paused, at: {{phase: work, after: 200ms}}, for: 300ms}}
  - {{terminate: terminated, at: {{phase: work, after: 300ms}}}}
  - {{kill: awaited, at: {{phase: work, after: 400ms}}}}
  - {{restart: restarted, at: {{phase: work, after: 500ms}}}}
  - {{cpu: local, at: {{phase: work, after: 0s}}, for: 400ms}}
  - {{memory: local, at: {{phase: work, after: 0s}}, for: 300ms, size: 32MB}}
  - {{disk: local, at: {{phase: work, after: 0s}}, for: 300ms, size: 8MB}}
  - {{kill_daemon: b, at: {{phase: work, after: 200ms}}}}
"""
# A bound on how late a fault may be done on a loaded 2-core machine (its daemon's loop, the
# pressures' own start): what is checked is that none is early, and none is lost.
LATE_AT_MOST_NS = 400_000_000


def test_scheduled_faults_are_done_at_their_instants_with_the_effects_the_machine_shows(tmp_path):
    path = tmp_path / "faults.yaml"
    path.write_text(FAULTS)
    run = ns_control("run", str(path), "--no-merge", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    record = read_run(tmp_path / "runs" / "latest")
    assert record.status == "ok"  # the faults' effects are not the run's failure
    said = {f.target: f for f in record.faults if f.kind in ("kill", "terminate", "pause", "restart")}
    pressure = {f.kind: f for f in record.faults if f.kind in ("cpu", "memory", "disk")}
    for fault in record.faults:
        assert not fault.error, fault
        assert fault.bound_ns is not None and fault.late_ns is not None
        assert -fault.bound_ns <= fault.late_ns < LATE_AT_MOST_NS, fault  # never early
        assert f"fault {fault.index} {fault.kind} {fault.target}" in run.stdout  # said live
    # b's daemon killed: its connection lost after, the run going on without b (no step after
    # waited for it, neither its component nor its daemon's node part), b's files salvaged.
    daemon = record.faults[-1]
    assert daemon.kind == "kill_daemon" and daemon.effect.endswith("its connection lost")
    assert daemon.done_ns <= daemon.effect_ns < daemon.done_ns + LATE_AT_MOST_NS
    assert not psutil.pid_exists(record.hosts["b"].daemon_pid)
    assert "b" in record.steps[1].hosts and all("b" not in step.hosts for step in record.steps[3:])
    assert record.hosts["b"].salvaged is not None
    ends = record.components
    assert "b/leaves" not in ends  # its end was its daemon's, which was not there to see it
    for name, code in (("killed", -9), ("terminated", -15), ("awaited", -9)):
        end, fault = ends[f"local/{name}"], said[name]
        assert (end.returncode, end.scheduled) == (code, True)
        # seen gone in /proc after the signal, and before the daemon's exit record of it
        assert fault.done_ns <= fault.effect_ns <= end.ended_ns, (fault, end)
    # Restarted: a second process, its output after the first's, ended at its stop as any other.
    pids = [int(line.split()[1]) for line in (tmp_path / "runs" / "latest" / "hosts" / "local" / "restarted"
                                              / "stdout").read_text().splitlines()]
    assert len(pids) == 2 and pids[0] != pids[1]
    assert said["restarted"].effect.endswith(f"started again as pid {pids[1]}")
    assert (ends["local/restarted"].returncode, ends["local/restarted"].scheduled) == (-15, False)
    work = record.steps[2].hosts["local"].components
    assert work["awaited"].outcome == KILLED and work["waiter"].outcome == "ok"
    # The paused program's own ticks stop at the SIGSTOP and resume only after its `for`.
    ticks = [int(t) for t in (tmp_path / "runs" / "latest" / "hosts" / "local" / "paused" / "stdout")
             .read_text().split()]
    gap = max(range(1, len(ticks)), key=lambda i: ticks[i] - ticks[i - 1])
    pause = said["paused"]
    assert ticks[gap - 1] <= pause.effect_ns and ticks[gap] >= pause.done_ns + 300_000_000
    assert pause.ended_ns >= pause.done_ns + 300_000_000  # seen running again after its `for`
    # The pressures, as the kernel accounted for them; gone after, none of their processes left.
    assert pressure["cpu"].measured["cpu_s"] > 0.02
    assert pressure["memory"].measured["rss_bytes"] >= 32e6
    assert pressure["disk"].measured["written_bytes"] >= 8e6
    assert not run_processes(record.id)
    # Each fault in its host's faults stream, and in report's section.
    hosts = tmp_path / "runs" / "latest" / "hosts"
    records = [list(StreamReader(next((hosts / h / "streams").glob("faults.*.ds")))) for h in ("local", "b")]
    assert all(r[-1].entity.full_name == "DS/close" for r in records)  # closed before collect listed it
    done = [r for r in records[0] + records[1] if r.entity.full_name == "FAULTS/fault"]
    assert sorted(r.tag for r in done) == list(range(9))
    # on the reference host, its stream's own clock is the global timeline's
    assert {r.tag: r.ts for r in records[0] if r.entity.full_name == "FAULTS/fault"} == \
        {f.index: f.done_ns for f in record.faults if f.host == "local"}
    # and each later instant an event of its own: an effect, a timed pause's or a pressure's
    # end, a restart's start again (its ended_ns)
    on_local = [f for f in record.faults if f.host == "local"]
    for name, field in (("effect", "effect_ns"), ("ended", "ended_ns")):
        assert {r.tag: r.ts for r in records[0] if r.entity.full_name == f"FAULTS/{name}"} == \
            {f.index: getattr(f, field) for f in on_local if getattr(f, field) is not None}, name
    assert said["paused"].index in {r.tag for r in records[0] if r.entity.full_name == "FAULTS/ended"}
    assert said["restarted"].index in {r.tag for r in records[0] if r.entity.full_name == "FAULTS/ended"}
    assert len(fault_lines(record)) == 10


# Exits 3 once the process of the pid in `pidfile` is gone: a crash the victim's end causes.
DEPENDENT = ("until [ -s {pidfile} ]; do sleep 0.01; done; p=$(cat {pidfile}); "
             "while kill -0 $p 2>/dev/null; do sleep 0.01; done; exit 3")


def test_a_crash_a_scheduled_kill_causes_still_fails_the_run(tmp_path):
    pidfile = tmp_path / "victim.pid"
    path = tmp_path / "crash.yaml"
    path.write_text(f"""\
experiment: crash
components:
  victim: {{command: "echo $$ > {pidfile}; exec sleep 30", start: launch, stop: after}}
  dependent: {{command: "{DEPENDENT.format(pidfile=pidfile)}", start: launch, stop: after}}
  waiter: {{command: [sleep, "0.8"], start: work}}
schedule: [launch, work, after, collect]
faults:
  - {{kill: victim, at: {{phase: work, after: 100ms}}}}
""")
    run = ns_control("run", str(path), "--no-merge", cwd=tmp_path)
    record = read_run(tmp_path / "runs" / "latest")
    assert run.returncode != 0 and record.status == "failed", run.stdout + run.stderr
    assert record.components["local/victim"].scheduled
    assert not record.components["local/dependent"].scheduled
    assert record.components["local/dependent"].returncode == 3
    [cause] = record.error.causes  # the dependent's crash alone: the victim's end is the fault's
    assert "component 'dependent' exited 3" in cause
    assert os.path.exists(pidfile)



def test_a_fault_that_never_happened_makes_the_run_partial_and_is_named(tmp_path):
    # Its instant lies after the run's end: the run once ended ok, exit 0, with nothing said.
    path = tmp_path / "late.yaml"
    path.write_text("""\
experiment: late
components:
  victim: {command: [sleep, "30"], start: launch, stop: after}
  waiter: {command: [sleep, "0.3"], start: work}
schedule: [launch, work, after, collect]
faults:
  - {kill: victim, at: {phase: work, after: 60s}}
""")
    run = ns_control("run", str(path), "--no-merge", cwd=tmp_path)
    record = read_run(tmp_path / "runs" / "latest")
    assert (run.returncode, record.status) == (3, "partial"), run.stdout + run.stderr
    [fault] = record.faults
    assert fault.done_ns is None and fault.error == "not done, or not reported, before the run ended"
    [cause] = record.error.causes
    assert "fault kill: not done" in cause and "victim" in cause
    assert "fault 0 kill victim" in run.stdout and "not done" in run.stdout  # said live


def test_what_a_kill_ended_a_start_or_a_restart_starts_again(tmp_path):
    """Once failed with 'was not running': a restart of a component a kill had ended, and no
    fault could start it again."""
    path = tmp_path / "again.yaml"
    path.write_text("""\
experiment: again
components:
  started: {command: "echo up $$; exec sleep 30", start: launch, stop: after}
  restarted: {command: "echo up $$; exec sleep 30", start: launch, stop: after}
  running: {command: [sleep, "30"], start: launch, stop: after}
  waiter: {command: [sleep, "1.5"], start: work}
schedule: [launch, work, after, collect]
faults:
  - {kill: started, at: {phase: work, after: 100ms}}
  - {start: started, at: {phase: work, after: 600ms}}
  - {kill: restarted, at: {phase: work, after: 100ms}}
  - {restart: restarted, at: {phase: work, after: 600ms}}
  - {kill: running, at: {phase: work, after: 0ms}}
  - {start: running, at: {phase: work, after: 100ms}}
  - {start: running, at: {phase: work, after: 300ms}}
""")
    run = ns_control("run", str(path), "--no-merge", cwd=tmp_path)
    record = read_run(tmp_path / "runs" / "latest")
    out = tmp_path / "runs" / "latest" / "hosts" / "local"
    for name, fault in (("started", record.faults[1]), ("restarted", record.faults[3])):
        pids = [int(line.split()[1]) for line in (out / name / "stdout").read_text().splitlines()]
        assert len(pids) == 2 and pids[0] != pids[1], pids
        assert not fault.error, fault
        assert fault.effect == f"it had ended (was killed by SIGKILL); started again as pid {pids[1]}", fault
        # running again after its instant, on the host's clock
        assert fault.done_ns <= fault.effect_ns < fault.done_ns + LATE_AT_MOST_NS, fault
        # the second process ended at its stop as any other: the run's end of it, not the kill's
        assert (record.components[f"local/{name}"].returncode, record.components[f"local/{name}"].scheduled) \
            == (-15, False)
    # a start of one running is refused, said, and the run is not ok for it
    refused = record.faults[6]
    assert refused.error.startswith("component running is running (pid "), refused
    assert run.returncode != 0 and record.status == "partial", run.stdout + run.stderr
    assert any("fault start" in cause and "is running" in cause for cause in record.error.causes), \
        record.error.causes
