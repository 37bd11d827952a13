#!/usr/bin/env bash
# One GPU session (device machine): build, GPU tests, benchmarks, the HIP kernels through the
# HIP-on-CUDA shim; logs and results under $OUT (or .out/). Prints a short summary last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} MYMETAOPS_CUDA_ARCHS=${MYMETAOPS_CUDA_ARCHS:-90a}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
summary=()
step() {  # step NAME LOG COMMAND...: run, keep the log, record pass/fail and seconds
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  if "$@" >"$OUT/$log" 2>&1; then summary+=("PASS $name ($((SECONDS - t0)) s)")
  else summary+=("FAIL $name ($((SECONDS - t0)) s): see $log"); tail -n 40 "$OUT/$log"; fi
}
nvidia-smi -L; python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
step "build (cuda/, sm_90a)" build.log python3 setup.py build_ext --inplace
step "gpu tests (cuda/ kernels)" gpu_tests.log python3 -m pytest -m gpu -q tests
step "bench table" bench.log python3 bench/embedding_bag_table.py --out "$OUT"
step "build (hip/ through the shim)" build_hip.log env MYMETAOPS_HIP_ON_CUDA=1 python3 setup.py build_ext --inplace --build-temp build/hip_on_cuda_obj
step "gpu tests (hip/ kernels, shim)" gpu_tests_hip.log python3 -m pytest -m gpu -q tests -k "native or large or unvalidated or bitwise"
echo; tail -n 3 "$OUT"/gpu_tests.log "$OUT"/gpu_tests_hip.log 2>/dev/null
cat "$OUT"/*embedding_bag.md 2>/dev/null
printf '%s\n' "${summary[@]}"
