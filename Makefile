# Cadenza: the two commands a newcomer runs are `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_HOME ?= demo
PYTEST_ARGS ?=
# The suite runs on two processes (pytest-xdist), a test file per process at a time; set
# PYTEST_WORKERS=0 to run it in one process.
PYTEST_WORKERS ?= 2

.PHONY: run test test-latest lock lint venv clean i18n i18n-pot bench soak dist

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# Exactly the versions the suite passed with: requirements/*.txt, every file checked against
# its hash; then Cadenza itself, editable, with nothing more resolved. Reinstalled when the
# lock or pyproject.toml changes (the stamp is older than them).
$(VENV)/.installed: pyproject.toml requirements/run.txt | $(BIN)/python
	$(BIN)/python -m pip install -q --require-hashes -r requirements/run.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml requirements/dev.txt | $(BIN)/python
	$(BIN)/python -m pip install -q --require-hashes -r requirements/dev.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $(VENV)/.installed $@

venv: $(VENV)/.installed

## make run: install, create the demo home (once), start the server
run: $(VENV)/.installed
	@if [ ! -f "$(DEMO_HOME)/cadenza.toml" ]; then $(BIN)/cadenza init "$(DEMO_HOME)" --example; fi
	$(BIN)/cadenza --home "$(DEMO_HOME)" serve

## make test: install with the test extras and run the whole suite
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

## make bench: Cadenza's W1 beside Huey, PgQueuer and procrastinate, interleaved rounds on a
## private PostgreSQL cluster it starts and stops; the table goes to docs/benchmarks.md.
## QUICK=1: fewer jobs, no procrastinate (a few minutes). The peers get their own venv
## (bench/.peers-venv), never Cadenza's.
bench: $(VENV)/.installed-test
	$(BIN)/python bench/compare.py --write $(if $(QUICK),--quick)

## make soak MINUTES=30: three nodes on a private PostgreSQL under a steady load and a random
## fault (kill -9, SIGSTOP, a cut from the database, a database restart) every two minutes or
## so, then the invariants and flat memory and open files (docs/reliability.md). POSIX only.
MINUTES ?= 30
soak: $(VENV)/.installed-test
	$(BIN)/python -m tests.faults.soak --minutes $(MINUTES)

## make dist: the wheel and the sdist in dist/ (python -m build), checked by twine; a desktop
## user installs the wheel with `pipx install "dist/cadenza-VERSION-py3-none-any.whl"`.
dist: $(VENV)/.installed-test
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/python -m twine check --strict dist/*

## make lock: resolve the newest versions within pyproject.toml's ranges again, for every
## platform (Linux, Windows, macOS) and Python >= 3.11, with hashes. On purpose only: review
## the diff, run `make test`, commit requirements/ with the change that needed it.
LOCK := $(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes --upgrade -q
lock: | $(BIN)/python
	$(BIN)/python -m pip install -q uv
	$(LOCK) -o requirements/run.txt
	$(LOCK) --extra dev -o requirements/dev.txt
	$(LOCK) --extra desktop -c requirements/dev.txt -o requirements/desktop.txt

## make test-latest: the suite on the newest versions pyproject.toml allows, in a venv of its
## own (.venv-latest), so that a library's new release breaks us here before a user's install.
## Not part of `make test` and not blocking: its result is written in docs/install.md.
LATEST := .venv-latest
test-latest:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install -q --upgrade pip
	$(LATEST)/bin/python -m pip install -q --upgrade -e '.[dev]'
	$(LATEST)/bin/python -m pip freeze --exclude-editable > $(LATEST)/versions.txt
	$(LATEST)/bin/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

## make i18n-pot: extract the strings of the pages, e-mails and labels into messages.pot
## make i18n: extract, then merge into every catalogue (no fuzzy matching, no obsolete
## entries: a changed English string is a new message to translate), then compile-check
LOCALES := src/cadenza/web/locale
CATALOGUES := fr zh_Hans
i18n-pot: $(VENV)/.installed-test
	$(BIN)/pybabel extract -F babel.cfg --no-location --omit-header --sort-output \
		-o $(LOCALES)/messages.pot .
i18n: i18n-pot
	for lang in $(CATALOGUES); do \
		if [ ! -f $(LOCALES)/$$lang/LC_MESSAGES/messages.po ]; then \
			$(BIN)/pybabel init -i $(LOCALES)/messages.pot -d $(LOCALES) -D messages -l $$lang; fi; \
		$(BIN)/pybabel update -i $(LOCALES)/messages.pot -d $(LOCALES) -D messages -l $$lang \
			--no-fuzzy-matching --ignore-obsolete --width 79 || exit 1; \
		$(BIN)/pybabel compile --statistics -d $(LOCALES) -D messages -l $$lang \
			-o /dev/null || exit 1; \
	done

## make lint: ruff on everything, mypy --strict on src
lint: $(VENV)/.installed-test
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy --strict src

clean:
	rm -rf $(VENV) $(LATEST) .pytest_cache .mypy_cache .ruff_cache
