"""The results browser: `ns_control serve`'s web app over the runs and campaigns directories,
and each result set's self-contained merged/report.html."""

DEFAULT_PORT = 8642  # ns_control serve's, when --port does not say
