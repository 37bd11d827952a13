# make demo: set up (venv, torch, build) and train the toy recsys model on this machine's device.
# make test: set up and run the test suite plus the CUDA / HIP / Triton-for-AMD compile checks.
# (Installing as a package instead: pip install --no-build-isolation [-e] . ; see pyproject.toml.)
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.14.1
PY := $(VENV)/bin/python
export CUDA_HOME ?= $(wildcard /usr/local/cuda)
export MAX_JOBS ?= 4

.PHONY: setup build demo test check-cuda check-hip check-triton bench clean

$(VENV)/.deps: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)" -r requirements.txt
	touch $@

setup: $(VENV)/.deps build

# Incremental (ninja): only changed sources are recompiled.
build: $(VENV)/.deps
	$(PY) setup.py -q build_ext --inplace

demo: setup
	$(PY) -m mymetaops.demo

test: setup check-cuda check-hip check-triton
	$(PY) -m pytest -q

# nvcc is needed for the CUDA build itself; this adds the register/spill audit of cuda/.
check-cuda:
	@if [ -n "$(CUDA_HOME)" ]; then bash scripts/check_cuda.sh; \
	else echo "check-cuda: skipped, no CUDA toolkit (set CUDA_HOME)"; fi

# Needs clang-19, clang-22 and libamdhip64-dev (apt); the script skips, loudly, what a missing one
# would check, unless MYMETAOPS_REQUIRE_HIP_CHECK=1 (CI), which makes it fail instead.
check-hip:
	bash scripts/check_hip.sh

check-triton: $(VENV)/.deps
	$(PY) scripts/check_triton_targets.py

bench: setup
	$(PY) bench/embedding_bag/embedding_bag_table.py

clean:
	rm -rf build mymetaops/*.so *.egg-info
