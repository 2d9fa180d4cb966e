# The README's two commands are `make synth` and `make test`; both set everything up first.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=
# cfn-lint checks to skip. W3005 is CDK boilerplate. For an instance type newer than cfn-lint's list
# (given with gpu_count and gpu_memory_gib), add E3030,W3030: make synth CFN_LINT_IGNORE=W3005,E3030,W3030
CFN_LINT_IGNORE ?= W3005
CDK := npx --no-install cdk

# Offline-safe CDK: no telemetry, no version check, no metadata lookups.
export CDK_DISABLE_CLI_TELEMETRY := true
export CDK_DISABLE_VERSION_CHECK := 1
export AWS_EC2_METADATA_DISABLED := true
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

.PHONY: setup synth test test-integration lint format clean mutation test-llamacpp test-package plan facts

# uv (from PyPI, pinned) installs the environment in a fraction of pip's time; pip is the fallback when uv
# cannot be installed (no pip for python3, an offline mirror without it). Either way the same pins install.
UV_VERSION := 0.13.8
UV_DIR := .uv
$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed, found " + sys.version.split()[0])'
	@if [ -x $(UV_DIR)/bin/uv ] || $(PYTHON) -m pip install --quiet --disable-pip-version-check --target $(UV_DIR) uv==$(UV_VERSION) >/dev/null 2>&1; then \
	  echo "installing $(VENV) with uv $(UV_VERSION)"; \
	  $(UV_DIR)/bin/uv venv --clear --quiet --seed --python $(PYTHON) $(VENV) && \
	  $(UV_DIR)/bin/uv pip install --quiet --compile-bytecode --python $(BIN)/python -r requirements-dev.txt && \
	  $(UV_DIR)/bin/uv pip install --quiet --python $(BIN)/python --no-deps -e .; \
	else \
	  echo "uv unavailable: installing $(VENV) with pip"; \
	  $(PYTHON) -m venv $(VENV) && \
	  $(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt && \
	  $(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps -e .; \
	fi
	touch $@

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

setup: $(VENV)/.installed node_modules/.installed

synth: setup
	rm -rf cdk.out
	$(CDK) synth --quiet $(ARGS)
	$(BIN)/cfn-lint --ignore-checks $(CFN_LINT_IGNORE) -- cdk.out/*.template.json && echo "cfn-lint: clean"
	@$(BIN)/python -m llmops.summary cdk.out

# The model checks before deploying, with the context keys cdk synth takes: make plan ARGS='-c max_model_len=65536'
plan: setup
	$(BIN)/python -m llmops.plan --context-file cdk.json $(ARGS)

# Look the configured Hub model up again and rewrite its entry in model-facts.json (commit the file).
facts: setup
	$(BIN)/python -m llmops.facts refresh --context-file cdk.json $(ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Both cores: a module's fixtures stay with the worker that runs it; idle workers steal what is left. The modules
# marked integration (whole apps in many variants, the real CDK CLI, pytest inside pytest) run in
# test-integration, which CI runs too, so that make test stays under 4.5 minutes on 2 cores.
test: setup lint
	$(BIN)/python -m pytest -n 2 --dist worksteal -m "not integration"

test-integration: setup
	$(BIN)/python -m pytest -n 2 --dist worksteal -m integration

# The library as users install it: a wheel, a fresh virtual environment outside the repository, and a consumer
# app with an empty cdk.json synthesized from a temporary folder (tests/package; about a minute on 2 cores).
test-package: setup
	LLM_PACKAGE_TEST=1 $(BIN)/python -m pytest tests/package -p no:cacheprovider -s

# Mutation testing of the integrity-critical code (not part of `make test`; tens of minutes on 2 cores).
# ONLY=preflight runs one suite; the README has the scores and how long each suite takes.
ONLY ?=
mutation: setup
	$(BIN)/python tools/mutation.py $(if $(ONLY),$(foreach s,$(ONLY),--only $(s))) $(if $(REPORT),--report) $(if $(RECHECK),--recheck) $(if $(MATCH),--match '$(MATCH)')

# The llama.cpp adapter against a real CPU llama-server, built once from the llama-cpp-python sdist's sources
# (minutes on 2 cores) and kept outside the clone, so later runs and fresh clones on the machine reuse it.
LLAMA_CPP_PYTHON := 0.3.36
LLAMA_CACHE ?= $(HOME)/.cache/llm-endpoint-llamacpp
test-llamacpp: setup
	bash containers/llamacpp/build_cpu_server.sh $(LLAMA_CACHE) $(LLAMA_CPP_PYTHON) $(BIN)/pip
	LLAMACPP_REAL_SERVER=$(abspath $(LLAMA_CACHE))/llama-server-$(LLAMA_CPP_PYTHON) \
		$(BIN)/python -m pytest tests/containers/test_llamacpp_real.py -p no:cacheprovider

clean:
	rm -rf cdk.out $(VENV) $(UV_DIR) node_modules .pytest_cache .ruff_cache .mutation
