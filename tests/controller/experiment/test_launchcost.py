"""What a launch asks of this machine: counted from the file, its default deadline grown to
cover it, and a deadline no machine of these cores could meet refused at check (issue 55)."""

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from netspec.controller.experiment import launchcost
from netspec.controller.experiment.launchcost import Launch, launch_here
from netspec.controller.experiment.load import load
from netspec.controller.experiment.model import Component, Host
from netspec.protocol.errors import ConfigError
from netspec.protocol.runplan import DockerSpec

PROGRAM = Path(__file__).parents[3] / "bench" / "twophases.py"


def fleet(tmp_path: Path, programs: int, launch: str = "launch") -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(textwrap.dedent(f"""\
        experiment: fleet
        hosts:
          h: {{count: {programs}}}
        components:
          w: {{group: h, program: {PROGRAM}}}
        schedule:
          - {launch}
          - warm
        """))
    return path


def test_the_machine_counts_its_local_hosts_and_local_containers_programs_and_launch_commands_only():
    hosts = {"local": Host("local"), "box": Host("box", docker=DockerSpec()),
             "far": Host("far", ssh="user@192.0.2.1"), "kept": Host("kept", address="192.0.2.2:7420"),
             "remote": Host("remote", docker=DockerSpec(engine="tcp://192.0.2.3:2376"))}
    components = [Component("p1", "local", program="p.py"), Component("p2", "box", program="p.py"),
                  Component("c1", "local", command=("sleep", "1")),
                  Component("c2", "local", command=("sleep", "1"), start="work"),
                  *(Component(f"x{h}", h, program="p.py") for h in ("far", "kept", "remote"))]
    assert launch_here(components, hosts, cores=2) == Launch(programs=2, commands=1, cores=2)


def test_the_floor_is_the_starts_cpu_over_the_cores():
    assert Launch(programs=1000, commands=200, cores=4).floor_s == pytest.approx(
        (1000 * launchcost.PROGRAM_START_CPU_S + 200 * launchcost.COMMAND_START_CPU_S) / 4)


def test_a_launch_deadline_this_machine_cannot_meet_is_refused_naming_its_line_and_the_figure(tmp_path):
    path = fleet(tmp_path, 1000, "{phase: launch, deadline: 5s}")
    with pytest.raises(ConfigError) as err:
        load(path)
    floor = 1000 * launchcost.PROGRAM_START_CPU_S / os.cpu_count()
    said = (f"{path}:7: schedule[0].deadline: a deadline of 5 s cannot be met: this machine starts 1000 "
            f"NETSPEC-aware programs at launch, at least {floor:.1f} s of its {os.cpu_count()} core")
    assert said in str(err.value)


def test_the_default_launch_deadline_covers_what_a_machine_of_few_cores_takes_to_start_the_fleet(
        tmp_path, monkeypatch):
    path = fleet(tmp_path, 1000)
    monkeypatch.setattr(launchcost.os, "cpu_count", lambda: 64)
    assert load(path).schedule[0].deadline_s == 30 + 0.1 * 900  # the rule before: 0.1 s a component past 100
    monkeypatch.setattr(launchcost.os, "cpu_count", lambda: 1)  # the same fleet on one core
    floor = 1000 * launchcost.PROGRAM_START_CPU_S
    assert load(path).schedule[0].deadline_s == pytest.approx(launchcost.MARGIN * floor)


def test_start_logging_where_the_programs_load_their_writer_grows_and_is_refused_alike(tmp_path, monkeypatch):
    monkeypatch.setattr(launchcost.os, "cpu_count", lambda: 1)
    floor = 1000 * launchcost.LOGGING_START_CPU_S
    assert load(fleet(tmp_path, 1000, "start_logging")).schedule[1].deadline_s == pytest.approx(
        launchcost.MARGIN * floor)
    said = (rf"fleet.yaml:7: schedule\[0\].deadline: a deadline of 20 s cannot be met: this machine's 1000 "
            rf"NETSPEC-aware programs load their stream writer at their first start_logging, at least "
            rf"{floor:.1f} s of its 1 core")
    with pytest.raises(ConfigError, match=said):
        load(fleet(tmp_path, 1000, "{phase: start_logging, deadline: 20s}"))


def test_check_says_what_a_launch_asks_of_this_machine_once_it_takes_a_second(tmp_path):
    cores = os.cpu_count()
    programs = math.ceil(launchcost.SAID_FROM_S * cores / launchcost.PROGRAM_START_CPU_S)
    said = []
    for n in (programs, programs - 1):
        done = subprocess.run([str(Path(sys.executable).with_name("ns_control")), "check",
                               str(fleet(tmp_path, n))], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        said.append([line for line in done.stdout.splitlines() if line.startswith("  launch:")])
    floor = programs * launchcost.PROGRAM_START_CPU_S / cores
    assert said == [[f"  launch: this machine starts {programs} NETSPEC-aware programs at launch, at least "
                     f"{floor:.1f} s of its {cores} core{'s' if cores > 1 else ''} (60 ms of CPU a program, "
                     f"5 ms a command); its deadline 30 s"], []]
