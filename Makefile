# FuseForge: `make run` starts the service on embedded defaults; `make test` runs the whole suite.
# Both use one virtualenv, .venv/ at the repo root.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: install run test test-services typecheck clean

$(INSTALLED): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --editable '.[dev]'
	touch $@

install: $(INSTALLED)

run: install
	$(BIN)/fuseforge run

test-services:
	bash scripts/test-services.sh

test: install test-services
	$(BIN)/python -m pytest $(PYTEST_ARGS)

typecheck: install
	$(BIN)/python -m mypy

clean:
	rm -rf $(VENV) .fuseforge .pytest_cache .mypy_cache
