"""The run engine: a plan driven through its steps, barriers, releases, and a run's texts."""
