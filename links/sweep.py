"""What a run left of its link conditions on this host, found by its names and removed:
`netspecd --kill-run` runs it (ns_control collect and salvage, a daemon that died hard), and
so does the next daemon started on the host for each run whose daemon died
(daemon/leftovers.py). A queue needs nothing: it is bound to a socket, and went with the
daemon's process."""

from __future__ import annotations

from . import kernel, names
from .names import ToolFailed


def sweep(run_id: str) -> list[str]:
    """Remove the run's nftables table, iptables chain and htb qdiscs; what was removed."""
    removed = []
    try:
        names.run(["nft", "delete", "table", "netdev", names.table(run_id)])
        removed.append(f"nftables table {names.table(run_id)}")
    except ToolFailed:
        pass
    removed += kernel.iptables_remove(run_id)
    removed += kernel.tc_sweep(run_id)
    return removed
