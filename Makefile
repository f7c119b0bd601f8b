# pyg_dynscale: one-command set-up, demo, tests and docs.
#
#   make demo    set up .venv (core only: nothing compiles) if needed, then train
#                DGC's T-GCN on England COVID with 2 processes and PGC
#   make test    set up .venv (everything) if needed, then run the test suite
#   make test-fast  the same set-up, then the tests that start no process (-m "not slow"): < 3 min
#   make docs    set up .venv (+ docs extra) if needed, then build docs/_build/html
#   make setup   only the set-up
#   make gpu-check  on a CUDA machine: the CUDA tests (never-run paths first), then
#                benchmarks/bench_gpu.py, each step under its own timeout, report in docs/gpu.md
#                (GPU_CHECK_ARGS="--quick --report FILE": < 8 min); runs $(PYTHON) as it is
#
# The set-up is idempotent: it is keyed on a hash of pyproject.toml, this
# Makefile and TORCH_SPEC, and skips pip entirely when nothing changed.
#
# Variables (override on the command line or in the environment):
#   PYTHON          creates the venv; `make gpu-check` runs it (python3)
#   VENV            the virtual environment                    (.venv)
#   TORCH_SPEC      the torch requirement installed FIRST       (torch==2.13.0)
#                   e.g. TORCH_SPEC="torch==2.5.1 --index-url https://download.pytorch.org/whl/cu124"
#   PYG_WHEELS      find-links page with prebuilt torch-scatter / torch-sparse
#                   wheels, e.g. https://data.pyg.org/whl/torch-2.5.1+cu124.html
#                   (empty: compile them from source)
#   MAX_JOBS        parallel compile jobs for torch-scatter / torch-sparse (2)
#   PYTEST_ARGS     extra arguments for pytest in `make test`
#   TEST_WORKERS    pytest-xdist workers for `make test` / `make test-fast` (2: the tests that start
#                   processes run one after another on one worker, the others beside them; 0: no xdist)
#   TEST_THREADS    OMP_NUM_THREADS for the tests (1: tests use small graphs and
#                   start several processes; more OpenMP threads than free cores
#                   make every op spin-wait, e.g. 200 s instead of 7 s for one test)
#   DEMO_ARGS       extra arguments for `pyg-dynscale train` in `make demo`
#   GPU_CHECK_ARGS  extra arguments for benchmarks/gpu_check.py, e.g. --quick (tests and
#                   benchmark under 8 minutes), --report FILE, --logs DIR, --collect-only

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PYG_WHEELS ?=
MAX_JOBS ?= 2
PYTEST_ARGS ?=
TEST_THREADS ?= 1
TEST_WORKERS ?= 2
DEMO_ARGS ?=
GPU_CHECK_ARGS ?=

PY := $(VENV)/bin/python
PIP := $(PY) -m pip
EXTRAS := pygt,test,bench

SETUP_HASH := $(shell { cat pyproject.toml Makefile; echo "$(TORCH_SPEC) $(PYG_WHEELS) $(EXTRAS)"; } | sha256sum | cut -c1-16)
STAMP := $(VENV)/.setup-stamp-$(SETUP_HASH)
DEMO_STAMP := $(VENV)/.demo-stamp-$(SETUP_HASH)
DOCS_STAMP := $(VENV)/.docs-stamp-$(SETUP_HASH)

.PHONY: setup setup-core demo test test-fast docs gpu-check clean-docs distclean help

help:
	@sed -n '3,11p' Makefile | sed 's/^# \{0,1\}//'

setup: $(STAMP)

# Install order matters:
#  1. torch, explicitly and first (TORCH_SPEC), so that nothing later pulls a
#     different (e.g. multi-GB CUDA) build to satisfy a looser requirement;
#  2. the pure-Python core deps;
#  3. torch-scatter / torch-sparse with --no-build-isolation: they compile
#     against the torch installed in step 1 (pip caches the built wheels, so a
#     second fresh venv takes seconds here);
#  4. the project itself, editable, with its extras: every requirement above is
#     already satisfied, so pip installs only what is still missing.
$(STAMP):
	@echo ">>> setting up $(VENV) (stamp $(SETUP_HASH))"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -U pip wheel "setuptools>=77"
	$(PIP) install -q $(TORCH_SPEC)
	$(PIP) install -q torch-geometric numpy tqdm numba
	MAX_JOBS=$(MAX_JOBS) $(PIP) install --no-build-isolation \
		$(if $(PYG_WHEELS),--find-links $(PYG_WHEELS)) torch-scatter torch-sparse
	$(PIP) install -q --no-build-isolation -e ".[$(EXTRAS)]"
	$(PY) -c "import torch, torch_geometric, torch_scatter, torch_sparse, torch_geometric_temporal, pyg_dynscale; print('>>> torch', torch.__version__, '| PyG', torch_geometric.__version__, '| pyg_dynscale', pyg_dynscale.__version__)"
	@rm -f $(VENV)/.setup-stamp-* $(VENV)/.demo-stamp-*
	@touch $@ $(DEMO_STAMP)

# The demo needs only the core package (torch, PyG, numpy, tqdm, numba: all
# wheels), not PyGT or the compiled torch-scatter / torch-sparse, so a first
# `make demo` compiles nothing. A full set-up (`make setup` / `make test`)
# satisfies it too.
setup-core: $(DEMO_STAMP)

$(DEMO_STAMP):
	@if ls $(VENV)/.setup-stamp-$(SETUP_HASH) >/dev/null 2>&1; then touch $@; exit 0; fi; \
	echo ">>> setting up $(VENV) for the demo (core package only, stamp $(SETUP_HASH))"; \
	test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	$(PIP) install -q -U pip wheel "setuptools>=77"; \
	$(PIP) install -q $(TORCH_SPEC); \
	$(PIP) install -q --no-build-isolation -e .; \
	rm -f $(VENV)/.demo-stamp-*; touch $@

$(DOCS_STAMP): $(STAMP)
	$(PIP) install -q --no-build-isolation -e ".[$(EXTRAS),docs]"
	@rm -f $(VENV)/.docs-stamp-*
	@touch $@

demo: $(DEMO_STAMP)
	$(PY) -m pyg_dynscale train england_covid --nproc 2 --scheme pgc --model tgcn-deep --epochs 50 $(DEMO_ARGS)

test: $(STAMP)
	OMP_NUM_THREADS=$(TEST_THREADS) MKL_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=15 $(PYTEST_ARGS)

# the edit-test loop's tier: every test but the `slow` ones (those that start processes: spawned ranks, the
# command line, torchrun, benchmarks, notebooks; tests/helpers/slow.py)
test-fast: $(STAMP)
	OMP_NUM_THREADS=$(TEST_THREADS) MKL_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadgroup --durations=10 $(PYTEST_ARGS)

docs: $(DOCS_STAMP)
	$(PY) -m sphinx -b html -q docs docs/_build/html
	@echo ">>> docs built: docs/_build/html/index.html"

# No venv and no install on purpose: GPU users have their own CUDA builds of
# torch and PyG (often another torch than TORCH_SPEC, often offline); the
# script puts the checkout on PYTHONPATH (benchmarks/gpu_check.py).
gpu-check:
	$(PYTHON) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

clean-docs:
	rm -rf docs/_build docs/api/generated

distclean: clean-docs
	rm -rf $(VENV) *.egg-info
