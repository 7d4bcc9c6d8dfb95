"""Which components take part in a step, by host (the schedule's rule), and what each
host is sent to enter it."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from netspec.protocol import messages as m
from netspec.protocol.errors import NetspecError, StepFailed

from ..experiment.model import NODE_STEPS, Plan, Step


@dataclass(frozen=True)
class StepPlan:
    """A step's participants by host, how many they are, and each host's enter."""

    participants: dict[str, list[str]]
    count: int
    enters: dict[str, list[dict[str, Any]]]


class StepPlans:
    """The StepPlan of each step of a run. A schedule repeats steps alike (the same phase,
    components and params), so each is built once and reused: a step then starts in O(1)
    whatever the fleet's size, not O(hosts). Reused while what it depends on stands:
    registered phases and ended components only grow, so their counts tell a change."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.components = {c.name: c for c in plan.components}
        self._built: dict[tuple[Any, ...], StepPlan] = {}

    def of(self, step: Step, registered: Mapping[str, Sequence[str]], ended: Mapping[str, str]) -> StepPlan:
        """Raises StepFailed as `take_part` does."""
        node = self.node_params(step)
        key = (step.phase, step.components, json.dumps(step.params, sort_keys=True, default=str),
               json.dumps(node, sort_keys=True, default=str), len(registered), len(ended))
        built = self._built.get(key)
        if built is None:
            participants = take_part(self.plan, step, registered, ended)
            enters = {host: [{"name": n, "params": {**self.components[n].params, **step.params}
                              if n != m.NODE else node} for n in names]
                      for host, names in participants.items()}
            built = self._built[key] = StepPlan(participants, sum(map(len, participants.values())), enters)
        return built

    def node_params(self, step: Step) -> dict[str, Any]:
        """What the daemon itself is given for a step (its participant `netspecd`)."""
        if step.phase != m.SYNC_CLOCKS:
            return step.params
        bound = self.plan.clock.until_bound_us
        # Each daemon gives up a little before the step's deadline, so that its ack says
        # how far its clock got rather than the step only timing out.
        return {**step.params, "until_bound_ns": None if bound is None else round(bound * 1000),
                "wait_s": max(step.deadline_s - min(1.0, step.deadline_s / 10), 0.0)}


def take_part(plan: Plan, step: Step, registered: Mapping[str, Sequence[str]],
              ended: Mapping[str, str]) -> dict[str, list[str]]:
    """The participants of `step` by host. `registered`: the phases each aware component
    registered at launch; `ended`: components netspec ended earlier in the run.

    Raises:
        StepFailed: a component the step names takes no part in it, or no component
        registered a phase of the experiment's own.
    """
    chosen: list[str] = []
    for comp in plan.components:
        if comp.name in ended:
            continue
        if step.phase in ("launch", "collect"):
            takes_part = step.phase == "collect" or comp.aware or comp.start == "launch"
        elif comp.aware:
            takes_part = step.phase in registered.get(comp.name, ())
        else:
            takes_part = step.phase in (comp.start, comp.stop)
        if step.components is not None and comp.name in step.components:
            if not takes_part:
                raise StepFailed(step.phase, {comp.host: NetspecError(
                    f"component '{comp.name}' takes no part in phase '{step.phase}' "
                    f"(it registered: {', '.join(registered.get(comp.name, [])) or 'none'})")})
            chosen.append(comp.name)
        elif step.components is None and takes_part:
            chosen.append(comp.name)
    if not chosen and not step.builtin:
        raise StepFailed(step.phase, {h.name: NetspecError(
            f"no component registered phase '{step.phase}'") for h in plan.hosts})
    by_host: dict[str, list[str]] = {}
    if step.phase in NODE_STEPS and step.components is None:
        # Every daemon takes part in node-wide steps: its node services act on them.
        by_host = {h.name: [m.NODE] for h in plan.hosts}
    components = {c.name: c for c in plan.components}
    for name in chosen:
        by_host.setdefault(components[name].host, []).append(name)
    return by_host
