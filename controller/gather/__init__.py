"""Gathering a run's files: fetched from the daemons, salvaged without them, collected, pulled, bundled."""
