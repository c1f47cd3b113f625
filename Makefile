# `make serve` runs the server on the embedded SQLite default; `make test` runs every test.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: serve test lint format openapi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.server-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[server]'
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@ $(VENV)/.server-installed

serve: $(VENV)/.server-installed
	$(BIN)/rgadmin serve

test: $(VENV)/.test-installed
	$(BIN)/python -m pytest

lint: $(VENV)/.test-installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(VENV)/.test-installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

openapi: $(VENV)/.server-installed
	$(BIN)/python -m app.openapi
