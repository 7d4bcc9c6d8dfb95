# netspec: `make demo` sets up and runs the demo experiment; `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: setup
	$(BIN)/ns_control run experiments/stimulus_response/stimulus_response.yaml

test: setup
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python bench/events.py
	$(BIN)/python bench/barrier.py

lint: setup
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) runs build *.egg-info
