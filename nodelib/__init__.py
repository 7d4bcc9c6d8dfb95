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

from netspec import camp as camp
from netspec.protocol.errors import ConnectionLost, NetspecError, ProtocolError

from .instrument import default as _streams
from .phases import Application, PhaseContext, PhaseWarning, component_params

_application = Application()
phase = _application.phase
register = _application.register
run = _application.run

event = _streams.event
interval = _streams.interval
counter = _streams.counter
histogram = _streams.histogram
samples = _streams.samples
trigger = _streams.trigger

__all__ = ["Application", "ConnectionLost", "NetspecError", "PhaseContext", "PhaseWarning", "ProtocolError",
           "component_params", "counter", "event", "histogram", "interval", "phase", "register", "run",
           "samples", "trigger"]
