"""Offline analysis of a run directory: stream readers, the merge onto one global timeline,
filters, exports and statistics."""
