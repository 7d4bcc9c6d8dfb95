"""The hosts of a run and their daemons: local, forked, over SSH; a run's files on a host."""
