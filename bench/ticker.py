"""The smallest NETSPEC-aware component: acks phase `tick` at once."""

from netspec import nodelib

nodelib.register("tick", lambda ctx: None)
nodelib.run()
