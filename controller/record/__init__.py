"""A run's directory and its record as the controller writes them while a run goes."""
