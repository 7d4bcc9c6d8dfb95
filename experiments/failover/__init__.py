"""A primary-backup service under a scheduled partition and a killed replica: the fail-over."""
