"""The browser tests' fixture: real runs, made once per session."""

from browser import results  # noqa: F401 (a fixture)
