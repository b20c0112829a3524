# FuseForge: `make run` starts the service on embedded defaults; `make test` runs the whole suite.
# Both use one virtualenv, .venv/ at the repo root.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: install run check lint typecheck test test-services test-browser clean

$(INSTALLED): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --editable '.[dev]'
	touch $@

install: $(INSTALLED)

run: install
	$(BIN)/fuseforge run

# The guardrails, each its own step: lint and import order, the layer contracts, the types.
check: lint typecheck

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/python -m mypy
	bash scripts/typecheck-tensorrt.sh

test-services:
	bash scripts/test-services.sh

# Chromium for the dashboard's browser tests (apt-get where missing; see the script).
test-browser:
	bash scripts/browser.sh

test: install check test-services test-browser
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .fuseforge .pytest_cache .mypy_cache .ruff_cache test-output
