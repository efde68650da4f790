# ftagent — common tasks. `make demo` and `make test` are the two commands a fresh machine needs.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export LITELLM_LOCAL_MODEL_COST_MAP ?= True
export OMP_NUM_THREADS ?= 1
# the tool env that `make tools` (ftagent env setup) creates with the default FT_FILE_PATH
export FT_TOOLS_ENV ?= $(CURDIR)/git_ignore_folder/finetune_files/envs/tools

.PHONY: dev system tools demo demo-plan test test-plan test-unit test-integration test-gpu gpu-check lint ui bench parity clean

$(BIN)/ftagent: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,ray]'
	@touch $@

dev: $(BIN)/ftagent  ## install ftagent (editable) with the dev and ray extras into .venv
	@command -v bwrap >/dev/null 2>&1 || echo "NOTE: bubblewrap is missing; the LLM planner refuses to run generated code unconfined (local/conda runners). Install it: sudo apt-get install bubblewrap (or use FT_ENV_TYPE=docker)"

system:  ## the system packages the suite uses (tmux, jq, bubblewrap, chromium): apt-get as root, else says what is missing; SKIP_SYSTEM=1 skips
	@if [ "$(SKIP_SYSTEM)" = 1 ]; then echo "system packages: SKIP_SYSTEM=1: none installed (the tests that need them skip)"; \
	else bash .ci/system-packages.sh; fi

tools: dev  ## create the local tool environment (LLaMA-Factory + OpenCompass, CPU torch)
	$(BIN)/ftagent env setup

# the demo needs no system package and no Docker (heuristic planner, local runner): only the two venvs
demo-plan:
	@echo "make demo installs into this folder only: .venv (ftagent) and the tool env (CPU torch, LLaMA-Factory,"
	@echo "OpenCompass) under git_ignore_folder/finetune_files/envs/tools; no system package, no Docker, nothing as root."

# the demo's last lines name the CLI's absolute path and the `source .venv/bin/activate` that puts it on PATH
demo: demo-plan tools  ## offline demo: tiny model, demo_add, heuristic planner, 3 loops
	$(BIN)/ftagent demo

# Two workers, a test file per worker (--dist loadfile keeps a file's fixtures on one worker): the suite
# took 62 min serially on 2 cores and 37 min so. TEST_WORKERS=0 runs it serially.
TEST_WORKERS ?= 2

# what `make test` installs beyond this folder, said before anything is installed
test-plan:
	@echo "make test installs: .venv and the tool env in this folder, then (as root, where missing):"
	@if [ "$(SKIP_SYSTEM)" = 1 ]; then echo "system packages: SKIP_SYSTEM=1: none"; else bash .ci/system-packages.sh --plan; fi
	@bash .ci/docker.sh plan

test: test-plan tools system  ## the full suite, as CI runs it: unit + parity + integration (+ Docker where an engine can run, gpu skipped without a GPU)
	bash .ci/with-docker.sh $(BIN)/python -m pytest tests -q -rs -n $(TEST_WORKERS) --dist loadfile

test-unit: dev
	$(BIN)/python -m pytest tests/unit -q

test-integration: tools
	$(BIN)/python -m pytest tests/integration -q -rs

parity: tools  ## ftagent vs stock OpenCompass / the official scorers on the same outputs (tests/parity)
	$(BIN)/python -m pytest tests/parity -q -rs

test-gpu: dev
	$(BIN)/python -m pytest tests/gpu -q -rs

gpu-check:  ## the GPU device check (tests/gpu/run_device_check.sh; GPU_CHECK_ARGS=--dry-run on CPU)
	bash tests/gpu/run_device_check.sh $(GPU_CHECK_ARGS)

lint: dev  ## ruff + the import-linter layer contracts (pyproject.toml [tool.importlinter]) + mypy ([tool.mypy])
	$(BIN)/ruff check ftagent tests
	$(BIN)/lint-imports
	$(BIN)/mypy

ui: dev  ## Streamlit UI over ./log
	$(BIN)/ftagent ui --log-dir log

bench: tools  ## benchmarks (ratios measured side by side), see docs/benchmarks-perf.md
	$(BIN)/python -m tests.bench.run_all

clean:
	rm -rf .pytest_cache .ruff_cache build dist *.egg-info
