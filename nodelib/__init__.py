"""What runs inside a node's processes: the phase API and the instrumentation API
applications call, the datastream writer, and the wire framing, authentication and
messages shared with the daemon and the controller.

Applications use only the names in `__all__`:

    from netspec import nodelib

    SENT = nodelib.event("STIM", "send")

    @nodelib.phase()
    def run(ctx):
        SENT.log(1)

    nodelib.run()
"""

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

__all__ = ["Application", "PhaseContext", "PhaseWarning", "component_params", "counter", "event",
           "histogram", "interval", "phase", "register", "run", "samples", "trigger"]
