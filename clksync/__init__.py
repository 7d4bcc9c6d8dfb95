"""Clock synchronisation measurement, never adjustment: kernel-timestamped UDP probes
between every host and the reference host (server, client, packets, stamps), clock-change
detection (watch), the online bound that gates `sync_clocks` (gate), the node service that
runs them in netspecd and logs every exchange (node), and the offline fit that converts a
host's timestamps to the reference clock with an error bound (fit, records)."""
