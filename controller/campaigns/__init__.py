"""Campaigns: a sweep of parameter points, repeated until stable, and their hooks."""
