"""What runs inside a node's processes: the phase API applications call, and the wire
framing, authentication and messages shared with the daemon and the controller.

Applications use only the names in `__all__`:

    from netspec import nodelib

    @nodelib.phase()
    def run(ctx): ...

    nodelib.run()
"""

from .phases import Application, PhaseContext, PhaseWarning, component_params

_application = Application()
phase = _application.phase
register = _application.register
run = _application.run

__all__ = ["Application", "PhaseContext", "PhaseWarning", "component_params", "phase",
           "register", "run"]
