# FuseForge: `make run` starts the service on embedded defaults; `make test` runs the whole suite,
# `make test-fast` the loop a developer lives in. All use one virtualenv, .venv/ at the repo root.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed

.PHONY: install run check lint typecheck test test-fast test-all-dialects test-kernels test-services test-browser clean

$(INSTALLED): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --editable '.[dev,openvino]'
	touch $@

install: $(INSTALLED)

run: install
	$(BIN)/fuseforge run

# The guardrails, each its own step: lint and import order, the layer contracts, the types.
check: lint typecheck

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_test_imports.py
	$(BIN)/python scripts/check_registry_names.py

typecheck: install
	$(BIN)/python -m mypy
	bash scripts/typecheck-tensorrt.sh

test-services:
	bash scripts/test-services.sh

# Chromium for the dashboard's browser tests (apt-get where missing; see the script).
test-browser:
	bash scripts/browser.sh

# The tiers are markers put on by path and fixture (tests/support/markers.py). `make test` runs
# every test on SQLite and, on PostgreSQL too, those whose code the dialects run differently
# (both_dialects); TEST_MARKERS= (or `make test-all-dialects`) runs every PostgreSQL copy.
TEST_MARKERS ?= not second_dialect or both_dialects
FAST_MARKERS := not slow and not second_dialect

# TEST_WORKERS pytest-xdist processes side by side, a module (the browser tests: their package)
# to one worker, so each stack starts once; every worker has its own Redis databases
# (tests/support/broker.py). TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2

test: install check test-services test-browser
	$(BIN)/python -m pytest -m "$(TEST_MARKERS)" -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

test-all-dialects:
	$(MAKE) test TEST_MARKERS=

# Optimizer and unit tests on SQLite: no e2e, browser or embedded-worker stacks, no check step;
# FAST_WORKERS pytest-xdist processes side by side, as `make test`'s.
FAST_WORKERS ?= 2

test-fast: install test-services
	$(BIN)/python -m pytest -m "$(FAST_MARKERS)" -n $(FAST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The Triton kernels (tests/gpu) through Triton's interpreter on the CPU: torch's CPU wheel and
# triton go into a virtualenv of their own, so .venv (and `make test`) stays torch-free.
# tests/gpu/conftest.py turns the interpreter on (TRITON_INTERPRET) before triton is imported.
KERNEL_VENV := .venv-kernels
KERNEL_PACKAGES := torch==2.13.0 triton==3.8.0

test-kernels:
	test -x $(KERNEL_VENV)/bin/python || $(PYTHON) -m venv $(KERNEL_VENV)
	$(KERNEL_VENV)/bin/python -m pip install --quiet --editable . pytest pytest-timeout $(KERNEL_PACKAGES)
	$(KERNEL_VENV)/bin/python -m pytest -m kernels tests/gpu $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(KERNEL_VENV) .fuseforge .pytest_cache .mypy_cache .ruff_cache test-output
