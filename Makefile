# toki — two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run demo test lint typecheck pytest bench clean real-envs

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

## run: set up, then the demo and the verdict matrix at the default budget, written into a new
## folder under toki-out/ (printed); the committed verdict_matrix/ changes only by `make reproduce`
run: $(STAMP)
	$(PY) -m toki.cli demo
	$(PY) -m toki.cli matrix --budget default

## demo: the Lisbon → Berlin story only
demo: $(STAMP)
	$(PY) -m toki.cli demo

## test: set up, then lint, type-check and run every test
test: lint typecheck pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check toki tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict toki

pytest: $(STAMP)
	$(VENV)/bin/pytest -q

## real-envs: create the real libraries' environments from toki/real/locks (cached outside the
## checkout, in $TOKI_REAL_CACHE or ~/.cache/toki/real, keyed by each lock file's hash)
real-envs: $(STAMP)
	$(PY) -m toki.cli real setup all

## bench: run every benchmark, writing benchmarks/results/*.json
bench: $(STAMP)
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

.PHONY: paper-assets paper reproduce

## paper-assets: regenerate benchmarks/README.md and paper/generated/ from the result files
paper-assets: $(STAMP)
	$(PY) -m benchmarks.report
	$(PY) paper/assets.py

## paper: build paper/toki.pdf (needs a LaTeX toolchain)
paper: paper-assets
	@if command -v latexmk >/dev/null 2>&1; then \
	  cd paper && latexmk -pdf -interaction=nonstopmode -halt-on-error toki.tex; \
	elif command -v pdflatex >/dev/null 2>&1; then \
	  cd paper && pdflatex -interaction=nonstopmode toki && bibtex toki && \
	  pdflatex -interaction=nonstopmode toki && pdflatex -interaction=nonstopmode toki; \
	else \
	  echo "no LaTeX toolchain found; install one with:"; \
	  echo "  apt-get install texlive-latex-recommended texlive-latex-extra latexmk"; \
	  exit 1; \
	fi

## reproduce: regenerate every result from scratch (proofs, matrix, calibration, ...), timed
reproduce: $(STAMP)
	$(PY) scripts/reproduce.py
