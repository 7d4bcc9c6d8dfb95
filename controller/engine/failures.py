"""What a failed step says about each host: its acks if it finished, or the error that
stands for its failure (an error ack, a deadline passed, a lost daemon); and what the run
says of a host it could not reach before its first step."""

from __future__ import annotations

from typing import Any

from netspec.protocol import messages as m
from netspec.protocol.errors import (
    ComponentFailed,
    ConnectionLost,
    DeadlineExceeded,
    NetspecError,
    RemoteError,
    StepFailed,
    raise_if_any_failed,
    some_hosts,
)
from netspec.protocol.kinds import Ack, WireError

from ..experiment.model import Component
from ..record.results import ComponentResult
from .barrier import Barrier


def step_failures(barrier: Barrier, first: NetspecError, results: dict[str, ComponentResult],
                  components: dict[str, Component]) -> dict[str, Any]:
    """Each host's acks if it finished the step, or why it failed; `first` stopped it."""
    phase = barrier.step.phase
    outcome: dict[str, Any] = {h: [a for _, a in acks] for h, acks in barrier.by_host.items()
                               if barrier.host_done(h)}
    for (host, name), ack in barrier.acks.items():
        if ack.status == m.ACK_ERROR:
            outcome[host] = ack_failure(results, host, name, phase, ack)
    if isinstance(first, DeadlineExceeded):
        late = f"did not finish within the deadline of {first.seconds:g} s"
        for host, names in first.waiting.items():
            name = names[0]
            if barrier.opened.done():
                # Every ack was in: the deadline caught collect's fetch of the host's files
                # (Steps.step names them so), no participant's.
                outcome[host] = RemoteError(host, WireError(
                    type="DeadlineExceeded", message=f"its files were not all fetched within the deadline "
                                                     f"of {first.seconds:g} s"))
                continue
            if name == m.NODE:
                outcome[host] = RemoteError(host, WireError(type="DeadlineExceeded", message=late))
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
                ack: Ack) -> NetspecError:
    """The error an error ack from participant `name` stands for."""
    reason = f"failed: {ack.message or 'error'}"
    if name == m.NODE:
        return RemoteError(host, WireError(type="netspecd", message=ack.message or "error"))
    return ComponentFailed(results[name], phase, reason, ack.traceback)


CONNECTING = "connecting"  # what a run does before its first step: never a phase's name


class Unreachable(NetspecError):
    """A host whose daemon could not be started or connected to: no connection opened, so
    none was lost. Its words cannot be taken for a step's (a step may be named `connect`)."""

    def __init__(self, host: str, cause: BaseException | str):
        self.host = host
        detail = cause if isinstance(cause, str) else (
            cause.detail if isinstance(cause, ConnectionLost) and cause.detail else str(cause))
        super().__init__(f"could not reach host {host} ({CONNECTING}): {detail}")


class NotConnected(StepFailed):
    """The run could not reach or set up every host before its first step; `results` maps
    each host to what it got or its error (an Unreachable, or what failed once connected)."""

    def __init__(self, results: dict[str, Any]):
        super().__init__(CONNECTING, results)
        self.args = (f"could not reach or set up {len(self.failed)} of {len(results)} host(s) before the "
                     f"first step: {some_hosts(self.failed)}",)


def connect_failed(results: dict[str, Any]) -> None:
    """As `raise_if_any_failed`, before the first step: raises NotConnected."""
    try:
        raise_if_any_failed(CONNECTING, results)
    except StepFailed as exc:
        raise NotConnected(exc.results) from None


def not_reached(waiting: dict[str, list[str]], seconds: float) -> NotConnected:
    """The error for hosts still `waiting` (host -> what was not ready) at the connect deadline."""
    return NotConnected({h: Unreachable(h, f"{', '.join(what)} not ready within the connect deadline "
                                           f"of {seconds:g} s") for h, what in waiting.items()})
