# The two commands: `make demo` and `make test`. Both set up .venv first when needed.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.12 2>/dev/null || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint format test-sqlite test-postgres bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else "Python 3.12+ is needed (found " + sys.version.split()[0] + "); set PYTHON=/path/to/python3.12")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) manage.py demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/pytest -q -p no:randomly tests/house/test_budgets.py tests/house/test_django_fence.py

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The whole suite on the database DATABASE_URL names (SQLite by default).
test: lint
	$(VENV)/bin/pytest $(PYTEST_ARGS)

test-sqlite: lint
	env -u DATABASE_URL $(VENV)/bin/pytest $(PYTEST_ARGS)

test-postgres: lint
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/console} $(VENV)/bin/pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) var artifacts staticfiles
