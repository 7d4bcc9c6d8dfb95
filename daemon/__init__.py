"""`netspecd`: the per-host daemon that authenticates controllers and spawns, watches and
reaps the components of an experiment."""
