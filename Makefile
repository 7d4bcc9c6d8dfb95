# netspec: `make demo` sets up and runs the demo experiment; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-quick test-benches bench lint docs clean k8s-testbed k8s-testbed-down

setup: $(STAMP)

# constraints.txt pins what changes results (DuckDB, pyarrow, numba, numpy, scipy) to the
# versions the tests pass on; CI's .ci/run installs through this target too.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -c constraints.txt
	touch $(STAMP)

demo: setup
	$(BIN)/ns_control demo

# Two workers (this project's machines have two cores), which steal tests from each other when
# one runs out (the suite's tests differ in length by 100x); a `timing` test has the machine to
# itself while it runs (tests/conftest.py).
test: setup
	$(BIN)/python -m pytest -q -n 2 --dist worksteal -m "not benches"

# Every bench script from a fresh clone, each with its smallest settings (tests/e2e/test_benches.py):
# that each runs, not its figures. Apart from `make test`, to which they would add 1.5 minutes;
# CI's .ci/run runs both.
test-benches: setup
	$(BIN)/python -m pytest -q -n 2 --dist worksteal -m benches

# Unit tests: no namespaced hosts, no timing bounds, and not the end-to-end tier (tests/e2e/,
# every test of which tests/conftest.py marks e2e).
test-quick: setup
	$(BIN)/python -m pytest -q -n 2 -m "not nethosts and not e2e and not timing"

bench: setup
	$(BIN)/python bench/events.py
	$(BIN)/python bench/barrier.py

# ruff, import-linter's contracts (netspec's packages import downward only), and the manual
# built with --strict: a broken link, or a reference page that cannot be made (a key of the
# schema or an argument of ns_control without a description) fails it.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/python tools/lint_imports.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The manual as a site in site/ (open site/index.html); mkdocs.yml says how, tools/docs_hook.py
# generates its reference pages. `ns_control docs` reads the same pages in a terminal.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	@echo "the manual: $(CURDIR)/site/index.html"

# A real single-node Kubernetes on this machine, as root (tests/k8stestbed.py): its binaries built
# once per version into the cache (about 7 minutes on two free cores), netspec's image put in its
# runtime; it prints the KUBECONFIG to export. The tests start one of their own.
k8s-testbed: setup
	$(BIN)/python tests/k8stestbed.py up --netspec-image

k8s-testbed-down: setup
	$(BIN)/python tests/k8stestbed.py down

clean:
	rm -rf $(VENV) runs build site *.egg-info
