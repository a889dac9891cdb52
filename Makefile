# The two commands a user needs: `make demo` and `make test`; `make check` before a commit, `make test-fast`
# while changing code.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: demo test test-fast check bench bench-deps venv system-packages clean gpu-wheels

# pip installs the pinned CPU torch (pip finds its wheel where this machine keeps it); uv installs the rest, the
# ~200 packages resolved and unpacked in parallel: about a fifth of pip's CPU time. `make INSTALLER=pip` uses
# pip throughout (for an index that only pip's configuration names). torch stays pinned either way.
INSTALLER ?= uv
ifeq ($(INSTALLER),uv)
INSTALL = $(BIN)/uv pip install -q --python $(BIN)/python --constraint $(VENV)/torch-pin.txt
else
INSTALL = $(BIN)/pip install -q --constraint $(VENV)/torch-pin.txt
endif

# What millrace needs to run (`make demo`); the tests and benches add the `dev` extras on top.
$(RUN_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip uv
	# The CPU build of torch first: a looser pin would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	echo "torch==2.13.0" > $(VENV)/torch-pin.txt
	$(INSTALL) -e .
	touch $(RUN_STAMP)

$(DEV_STAMP): $(RUN_STAMP)
	$(INSTALL) -e '.[dev]'
	touch $(DEV_STAMP)

venv: $(DEV_STAMP)

demo: $(RUN_STAMP)
	$(BIN)/millrace demo

# Debian packages the tests need, when we are root on Debian and they are missing: chromium for the page
# tests, libmagic1 for python-magic (datatrove's WARC reader). One apt-get update for all of them.
system-packages:
	@missing=""; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	ldconfig -p 2>/dev/null | grep -q libmagic.so.1 || missing="$$missing libmagic1"; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's$$missing for the tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# One pytest worker per core (at most 4), a test file's tests in one worker so its module fixtures are built once;
# files handed out in the suite's order (slow files first, tests/conftest.py), not by their number of tests.
# The 25 slowest tests close the log: where the 20-minute budget goes.
PYTEST_WORKERS ?= -n auto --maxprocesses 4 --dist loadfile --no-loadscope-reorder

test: $(DEV_STAMP) system-packages
	$(BIN)/python -m pytest -q --durations=25 $(PYTEST_WORKERS)

# Every test not marked `slow` (CONTRIBUTING.md: what makes a test slow): a few minutes on two cores.
test-fast: $(DEV_STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_WORKERS)

# Format, lint, types and the rooms' import layers (config in pyproject.toml). Runs all four, fails if any fails.
# The same checks run from .pre-commit-config.yaml.
check: $(DEV_STAMP)
	@status=0; \
	$(BIN)/ruff format --check . || status=1; \
	$(BIN)/ruff check . || status=1; \
	PYTHONPATH=. $(BIN)/lint-imports || status=1; \
	$(BIN)/mypy || status=1; \
	exit $$status

# The loader bench's peers. Their dependency lists would replace the CPU torch with a CUDA build, pull a
# torchvision that does not load against it (`operator torchvision::nms does not exist`), and pin numpy < 2.2 and
# transformers < 5; so they go in without those lists, then with what they import for local text datasets,
# torch pinned. MosaicML imports torchvision only for its vision datasets (bench/bench_loader.py skips them).
$(BENCH_STAMP): $(DEV_STAMP)
	$(BIN)/pip install -q -c $(VENV)/torch-pin.txt --no-deps mosaicml-streaming==0.13.0 litdata==0.2.76
	$(BIN)/pip install -q -c $(VENV)/torch-pin.txt lightning-utilities brotli python-snappy zstd pillow 'transformers>=5'
	touch $(BENCH_STAMP)

bench-deps: $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench

# The wheels bench/gpu_mfu_device.sh installs on a GPU machine without network (its own Python and torch):
# for CPython $(GPU_PYTHON) on manylinux x86-64, into $(GPU_WHEELS)/ (ignored by git).
GPU_PYTHON ?= 3.12
GPU_WHEELS ?= .whl
gpu-wheels:
	rm -rf $(GPU_WHEELS)
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d $(GPU_WHEELS) -r bench/gpu_wheels.txt
	du -sh $(GPU_WHEELS)

clean:
	rm -rf $(VENV) millrace-data
