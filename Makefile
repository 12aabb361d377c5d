# Two entry points, both safe on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install bench clean

install: $(STAMP)

# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build (ENVIRONMENT.md).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

demo: install
	$(BIN)/pgrag demo

test: install
	$(BIN)/pytest

bench: install
	$(BIN)/python scripts/benchmarks.py --run

clean:
	rm -rf $(VENV) build dist *.egg-info
