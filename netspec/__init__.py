"""netspec: distributed experiments run in phases, and their results.

The public Python API is `netspec.results` (a run or a campaign opened, with its record,
outcome and tables) and `netspec.experiment` (a file loaded, checked and run); an
application's components import `netspec.nodelib`. This module imports nothing: netspecd
imports `netspec.daemon`, and loads nothing else of netspec's (docs/api.md).
"""
