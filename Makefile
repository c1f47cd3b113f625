# `make serve` runs the server on the embedded SQLite default; `make test` runs every test
# (it needs PostgreSQL, Java and Chromium: it stops in one line naming what is missing);
# `make test-fast` runs those that need none of the three, on SQLite alone.
# `make client` installs the Spark side apart from the server's venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# rgspark with PySpark and PyArrow, for drivers and local executors: never in $(VENV), where
# a non-editable install of the project would replace the server's editable one.
CLIENT_VENV := .venv-client
# The Spark tests on the oldest PySpark line rgspark supports ($(VENV) has the newest).
# PySpark 3.5 holds NumPy below 2, which PyArrow needs from 26 on.
SPARK35_VENV := .venv-spark35

.PHONY: serve test test-fast test-spark35 client lint format openapi docs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.server-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[server]'
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.server-installed

$(VENV)/.docs-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $@

$(CLIENT_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(CLIENT_VENV)
	$(CLIENT_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CLIENT_VENV)/bin/python -m pip install --quiet -e '.[spark]'
	touch $@

$(SPARK35_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(SPARK35_VENV)
	$(SPARK35_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SPARK35_VENV)/bin/python -m pip install --quiet -e '.[server,spark]' \
		'pyspark[sql]==3.5.*' 'pyarrow<26' 'pytest==9.2.0' 'pytest-timeout==2.4.0'
	touch $@

serve: $(VENV)/.server-installed
	$(BIN)/rgadmin serve

client: $(CLIENT_VENV)/.installed

test: $(VENV)/.test-installed
	$(BIN)/python -m pytest

test-fast: $(VENV)/.test-installed
	$(BIN)/python -m pytest -n auto -m "not spark and not browser and not postgresql"

# Only the tests that run Spark: the others of tests/spark do not depend on its version.
test-spark35: $(SPARK35_VENV)/.installed
	$(SPARK35_VENV)/bin/python -m pytest tests/spark -m spark

lint: $(VENV)/.test-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(VENV)/.test-installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The documentation site, into site/: --strict fails on a broken link or a page not in the nav,
# and the check on any script, style or font the pages would load from the network.
docs: $(VENV)/.docs-installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict
	$(BIN)/python scripts/check_site_offline.py site

openapi: $(VENV)/.server-installed
	$(BIN)/python -m app.openapi
