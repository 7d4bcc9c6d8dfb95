"""`ns_control` and what it needs: the experiment file model and loader, the fleet of
daemons, the phase engine, the run directory."""
