"""Clock synchronisation measurement: kernel-timestamped probes, clock-offset records,
the online "in sync" test and the offline clock fit. (The control-channel clock estimate
that `sync_clocks` uses today lives in controller/clocks.py.)"""
