"""What runs inside a node's processes: the phase API and the instrumentation API
applications call (entities and their streams are netspec.datastream's; CAMP's counters,
netspec.camp, are reachable as `nodelib.camp` too). The wire protocol it speaks with
netspecd lives in netspec.protocol, which applications do not use.

Applications use only the names in `__all__`; importing this package starts nothing and
opens no file:

    from netspec import nodelib

    SENT = nodelib.event("STIM", "send")

    @nodelib.phase()
    def run(ctx):
        SENT.log(1)

    nodelib.run()
"""

from __future__ import annotations

from netspec.protocol.errors import ConnectionLost, NetspecError, ProtocolError

from .instrument import default as _streams
from .pacer import Pacer
from .phases import Application, PhaseContext, PhaseWarning, component_params

TYPE_CHECKING = False  # typing's own flag, without importing typing: a program's start (nodelib's imports)
if TYPE_CHECKING:
    from typing import Any

_application = Application()
phase = _application.phase
"""`@nodelib.phase(name=None)`: a decorator registering the function as the callback of phase
`name` (default: the function's name); the callback takes a `PhaseContext`. The program's
`Application.phase`."""
register = _application.register
"""`nodelib.register(name, callback)`: run `callback(ctx)` when the controller enters phase
`name`. Raises NetspecError if the phase is registered twice."""
run = _application.run
"""`nodelib.run()`: hand control to netspec until the daemon says stop: netspecd enters each
phase, runs its callback and acks it (ok, a `PhaseWarning`'s warning, or an exception's
error). Raises NetspecError where the program was not started by netspecd."""
claim = _application.claim
"""`nodelib.claim(role, held=True)`: say this component now holds `role` (e.g. "leader"), or
with `held=False` that it let it go; a fault aimed at the role (`{kill: {role: leader}}`)
takes the component whose claim came last at its instant. Any thread may call it during
`nodelib.run()`. Raises NetspecError for a name that is not a role's, or outside `run`."""

event = _streams.event
"""`nodelib.event(group, name, desc="", decoder=None) -> Event`: declare an event, logged with
`.log(tag=0, data=None)` (data: any MessagePack value or bytes; `decoder` names the function
that unpacks it in analysis, docs/stream-format.md)."""
interval = _streams.interval
"""`nodelib.interval(group, name, desc="") -> Interval`: declare an interval: `t = .start()`,
then `.end(tag=0, start_ns=None)` logs it with both times (pass `t` where intervals overlap)."""
operation = _streams.operation
"""`nodelib.operation(group, name, desc="") -> Operation`: declare an operation with its
outcome: `t = .start()`, then `.ok(t)`, `.failed(t, cause)`, `.timed_out(t, cause)` or
`.unknown(t, cause)` (sent, no answer), each with `intended_ns=` a `Pacer`'s instant where
paced; each returns the latency in ns (docs/how-to/operations.md)."""
counter = _streams.counter
"""`nodelib.counter(group, name, desc="") -> Counter`: declare a running total: `.add(n=1)`
costs no record, `.log()` writes the total, `.reset()` sets it to zero."""
histogram = _streams.histogram
"""`nodelib.histogram(group, name, lo, hi, buckets=0, desc="", relative_error=None) -> Histogram`:
declare a histogram of `buckets` equal bins over [lo, hi) and one bin either side, or, with
`relative_error`, log bins that merge exactly across hosts and runs: `.add(v)` counts a
value, `.log()` writes (counts, sum), `.reset()`, `.flush()` logs and resets."""
samples = _streams.samples
"""`nodelib.samples(group, name, fields, desc="") -> SampleGroup`: declare a sample group:
`.log(values, ts=None)` logs one value per field at one instant."""
trigger = _streams.trigger
"""`nodelib.trigger(reason)`: write the kept chunks of every ring stream (`ring_chunks:` in the
experiment file; nothing for a normal stream)."""



def __getattr__(name: str) -> Any:
    """`nodelib.camp` (netspec.camp, CAMP's counters), imported when first asked for: a
    program that reads no counters does not pay for them at its start."""
    if name == "camp":
        from netspec import camp

        return camp
    raise AttributeError(f"module 'netspec.nodelib' has no attribute {name!r}")


__all__ = ["Application", "ConnectionLost", "NetspecError", "Pacer", "PhaseContext", "PhaseWarning",
           "ProtocolError", "claim", "component_params", "counter", "event", "histogram", "interval",
           "operation", "phase", "register", "run", "samples", "trigger"]
