# toki — two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

## run: set up, then run the main job on the embedded default
run: $(STAMP)
	$(PY) -m toki.cli demo

## test: set up, then lint, type-check and run every test
test: lint typecheck pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check toki tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict toki

pytest: $(STAMP)
	$(VENV)/bin/pytest -q

## bench: run every benchmark, writing benchmarks/results/*.json
bench: $(STAMP)
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
