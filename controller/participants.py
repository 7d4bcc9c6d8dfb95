"""Which components take part in a step, by host: the schedule's rule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from netspec.protocol import messages as m
from netspec.protocol.errors import NetspecError, StepFailed

from .model import NODE_STEPS, Plan, Step


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
