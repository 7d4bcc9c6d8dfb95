"""What a failed step says about each host: its acks if it finished, or the error that
stands for its failure (an error ack, a deadline passed, a lost daemon)."""

from __future__ import annotations

from typing import Any

from netspec.protocol import messages as m
from netspec.protocol.errors import ComponentFailed, DeadlineExceeded, NetspecError, RemoteError, StepFailed

from .barrier import Barrier
from .model import Component
from .results import ComponentResult


def step_failures(barrier: Barrier, first: NetspecError, results: dict[str, ComponentResult],
                  components: dict[str, Component]) -> dict[str, Any]:
    """Each host's acks if it finished the step, or why it failed; `first` stopped it."""
    phase = barrier.step.phase
    outcome: dict[str, Any] = {h: [a for _, a in acks] for h, acks in barrier.by_host.items()
                               if barrier.host_done(h)}
    for (host, name), ack in barrier.acks.items():
        if ack["status"] == m.ACK_ERROR:
            outcome[host] = ack_failure(results, host, name, phase, ack)
    if isinstance(first, DeadlineExceeded):
        late = f"did not finish within the deadline of {first.seconds:g} s"
        for host, names in first.waiting.items():
            name = names[0]
            if name == m.NODE:
                outcome[host] = RemoteError(host, {"type": "DeadlineExceeded", "message": late})
                continue
            why = late
            if phase == "launch" and components[name].aware:
                why += (" and never registered its phases (a program that does not use "
                        "netspec.nodelib must be given as `command:`)")
            outcome[host] = ComponentFailed(results[name], phase, why)
    else:
        where = first.result.host if isinstance(first, ComponentFailed) else first.host
        outcome[where] = first
    return outcome


def ack_failure(results: dict[str, ComponentResult], host: str, name: str, phase: str,
                ack: dict[str, Any]) -> NetspecError:
    """The error an error ack from participant `name` stands for."""
    reason = f"failed: {ack.get('message') or 'error'}"
    if name == m.NODE:
        return RemoteError(host, {"type": "netspecd", "message": ack.get("message") or "error"})
    return ComponentFailed(results[name], phase, reason, ack.get("traceback", ""))


def raise_if_any_failed(phase: str, results: dict[str, Any]) -> None:
    """`results` maps each host to its result or exception (asyncio.gather's
    return_exceptions); any exception fails the step, naming every host."""
    errors = [r for r in results.values() if isinstance(r, BaseException)]
    for error in errors:
        if not isinstance(error, Exception):
            raise error  # cancellation is not a host's failure
    if errors:
        raise StepFailed(phase, results)
