"""Link conditions on a host (netspecd's side): what its kernel offers, the backends that
apply a run's conditions, the user-space path, and the audit's probe traffic (probes.py)."""
