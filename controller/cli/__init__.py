"""ns_control, the command line."""
