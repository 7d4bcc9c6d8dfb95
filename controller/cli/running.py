"""The commands that run something: an experiment file (or the demo, a campaign), a past run
again, a campaign resumed; `check` of a file, and `up`/`down` of its SSH hosts' daemons."""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

from netspec.protocol.errors import ConnectionLost, NetspecError
from netspec.protocol.runoutcome import EXIT_FAILED, EXIT_OK
from netspec.protocol.runrecord import read_run

from ..engine import summary
from ..engine.failures import Unreachable
from ..engine.runner import RunOptions, run_plan
from ..engine.terminal import TERMINAL, print_lines
from ..experiment.launchcost import SAID_FROM_S, launch_here
from ..experiment.load import load, parse
from ..record.rundir import find_run

# A command imports what only it uses in its own body: ns_control's start is every command's
# latency, and the merge's libraries (numpy, pyarrow, DuckDB), the campaign's statistics and
# SSH's paramiko take about a second to import between them.


def cmd_run(args: argparse.Namespace) -> int:
    plan = load(args.file)
    if plan.campaign is not None:
        if args.no_merge:
            raise NetspecError(f"{args.file}: a campaign's repeat and report need each run merged: "
                               "--no-merge applies to a single run")
        from ..campaigns.campaign import CampaignDir, Campaigner

        return Campaigner(CampaignDir.create(args.campaigns, plan), _options(args)).run()
    _, outcome = run_plan(plan, _options(args))
    return outcome.exit_code


def cmd_demo(args: argparse.Namespace) -> int:
    """The demo from the installed package: works the same from a checkout, a wheel or pipx."""
    demo = resources.files("netspec.experiments").joinpath("stimulus_response", "stimulus_response.yaml")
    with resources.as_file(demo) as path:
        _, outcome = run_plan(load(path), _options(args))
    return outcome.exit_code


def _options(args: argparse.Namespace) -> RunOptions:
    return RunOptions(args.runs, args.quiet, getattr(args, "accept_new_host_keys", False),
                      getattr(args, "keep_daemons", False), TERMINAL, not getattr(args, "no_merge", False),
                      getattr(args, "share_hosts", False))


def cmd_resume(args: argparse.Namespace) -> int:
    from ..campaigns.campaign import CampaignDir, Campaigner, find_campaign

    cdir = CampaignDir.open(find_campaign(args.campaigns, args.campaign))
    if cdir.record.status == "done":
        print(f"campaign {cdir.record.id} is done: nothing to resume")
        return EXIT_OK
    return Campaigner(cdir, _options(args)).run()


def cmd_rerun(args: argparse.Namespace) -> int:
    path = find_run(args.runs, args.run)
    record = read_run(path)
    # The run's own copies of its programs stand in for the originals, wherever those are now.
    copies = {source: str((path / kept.copy).resolve()) for source, kept in record.programs.items()}
    plan = parse((path / "experiment.yaml").read_text(), Path(record.planned(path).source), copies,
                 shown=path.resolve() / "experiment.yaml")
    _, outcome = run_plan(plan, _options(args), {"rerun_of": record.id})
    return outcome.exit_code


def cmd_check(args: argparse.Namespace) -> int:
    plan = load(args.file)
    print_lines([f"warning: {w}" for w in plan.warnings], sys.stderr)
    steps = " -> ".join(s.phase for s in plan.schedule)
    print(f"{args.file}: ok: experiment '{plan.name}', {len(plan.hosts)} host(s), "
          f"{len(plan.components)} component(s)\n  schedule: {steps}")
    launch = launch_here(plan.components, {h.name: h for h in plan.hosts})
    for phase in ("launch", "start_logging"):
        step = next((s for s in plan.schedule if s.phase == phase), None)
        if step is not None and launch.floor_of(phase) >= SAID_FROM_S:
            print(f"  {phase}: {launch.describe(phase)}; its deadline {step.deadline_s:g} s")
    if plan.campaign is not None:
        c = plan.campaign
        until = f", then until {c.until} (at most {c.max_runs or c.runs})" if c.until else ""
        print(f"  campaign: {len(c.points)} point(s), {c.runs} run(s) each{until}"
              + (f", after {c.warmup} warm-up run(s)" if c.warmup else ""))
    return EXIT_OK


def cmd_up_down(args: argparse.Namespace) -> int:
    from ..hosts.remote import for_each_host

    plan = load(args.file)
    ssh_hosts = [h for h in plan.hosts if h.ssh]
    if not ssh_hosts:
        print(f"{args.file}: no ssh hosts (local hosts get a daemon for each run)")
        return EXIT_OK
    outcome = for_each_host(ssh_hosts, args.command, args.accept_new_host_keys)
    # A host whose ssh or daemon could not be reached lost no connection: said as a run says it.
    outcome = {h: Unreachable(h, r) if isinstance(r, ConnectionLost) else r for h, r in outcome.items()}
    print_lines(summary.host_lines(outcome))
    return EXIT_FAILED if any(isinstance(r, BaseException) for r in outcome.values()) else EXIT_OK

