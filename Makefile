# Cadenza: the two commands a newcomer runs are `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_HOME ?= demo
PYTEST_ARGS ?=
# The suite runs on two processes (pytest-xdist), a test file per process at a time; set
# PYTEST_WORKERS=0 to run it in one process.
PYTEST_WORKERS ?= 2

.PHONY: run test lint venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Reinstall when pyproject.toml changes (the stamp is older than it).
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(VENV)/.installed $@

venv: $(VENV)/.installed

## make run: install, create the demo home (once), start the server
run: $(VENV)/.installed
	@if [ ! -f "$(DEMO_HOME)/cadenza.toml" ]; then $(BIN)/cadenza init "$(DEMO_HOME)" --example; fi
	$(BIN)/cadenza --home "$(DEMO_HOME)" serve

## make test: install with the test extras and run the whole suite
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

## make lint: ruff on everything, mypy --strict on src
lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy --strict src

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
