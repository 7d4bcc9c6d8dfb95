"""A fleet at scale run for real: sixty local hosts with default settings, and a connect
deadline the experiment file sets. (The fleet's parts alone: tests/controller/hosts/test_fleet.py.)"""

import json

import pytest
from netspec.controller.engine.clocks import probe_interval_ms
from netspec.controller.engine.summary import LISTED_OK
from support import latest_record, ns_control

pytestmark = pytest.mark.e2e


def test_sixty_local_hosts_run_with_default_settings_and_say_what_they_changed(experiment, tmp_path):
    hosts = 60
    text = "experiment: many\nhosts:\n" + "".join(f"  h{i}: {{}}\n" for i in range(hosts))
    text += "components:\n" + "".join(f"  c{i}: {{host: h{i}, command: 'true'}}\n" for i in range(hosts))
    text += "schedule: [launch, collect]\n"
    done = ns_control("run", "--no-merge", str(experiment(text)), cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    stretched = probe_interval_ms(200, 59)  # 59 x 4 exchanges a volley within the reference's budget
    assert f"clksync: 59 hosts probe the reference every {stretched:.0f} ms, not 200 ms" in done.stdout
    assert f"and {hosts - LISTED_OK} more ok (slowest" in done.stdout
    record = latest_record(tmp_path / "runs")
    assert record["clksync"]["interval_ms"] == pytest.approx(stretched)
    assert len(record["hosts"]) == hosts and record["connect_deadline_s"] == 30
    launch = next(s for s in record["steps"] if s["phase"] == "launch")
    assert len(launch["hosts"]) == hosts
    assert json.loads(json.dumps(record["plan"]))["connect_deadline_s"] is None
    shown = ns_control("show", cwd=tmp_path).stdout
    assert f"and {hosts - LISTED_OK} more ok (slowest" in shown
    assert f"and {hosts - LISTED_OK} more exit 0" in shown
    assert f"{hosts} messages of ok acks not shown" in shown and len(shown.splitlines()) < 20
    one = ns_control("show", "--host", "h42", cwd=tmp_path).stdout
    assert "h42/c42: exited 0" in one and "h42/c42 " in one and "h41" not in one
    unknown = ns_control("show", "--host", "h99", cwd=tmp_path)
    assert unknown.returncode != 0 and "no host 'h99' (its hosts: h0, h1, h10," in unknown.stderr
    assert f"and {hosts - 10} more)" in unknown.stderr


def test_a_connect_deadline_set_in_the_file_is_kept(experiment, tmp_path):
    text = "experiment: hurried\nconnect_deadline: 1ms\nhosts: {a: {}, b: {}}\n"
    text += "components:\n  c: {host: a, command: 'true'}\nschedule: [launch, collect]\n"
    done = ns_control("run", "--no-merge", str(experiment(text)), cwd=tmp_path, timeout=60)
    assert done.returncode == 1
    assert "connect" in done.stderr and "0.001" in done.stderr, done.stderr
    assert latest_record(tmp_path / "runs")["connect_deadline_s"] == 0.001
