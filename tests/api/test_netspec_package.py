"""The package `netspec` itself (netspec/__init__.py)."""

import subprocess
import sys


def test_importing_netspec_loads_nothing_else_of_netspec_nor_the_merges_libraries():
    # netspecd imports netspec.daemon, which imports netspec first: it must bring nothing along.
    probe = ("import sys, netspec; print(sorted(m for m in sys.modules if m.split('.')[0] in "
             "('netspec', 'duckdb', 'pyarrow', 'numpy', 'msgspec')))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "['netspec']"
