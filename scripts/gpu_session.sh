#!/usr/bin/env bash
# One GPU session (device machine): build, benchmarks, GPU tests, the HIP kernels through the
# HIP-on-CUDA shim; logs and results under $OUT (or .out/). Prints a short summary last.
# Steps are ordered by what matters most if time runs out; each has its own time limit.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} MYMETAOPS_CUDA_ARCHS=${MYMETAOPS_CUDA_ARCHS:-90a}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-quick}
summary=()
# step NAME LOG SECONDS COMMAND...: run with a time limit, append to the log (both builds share
# build.log: at most 8 files come back from the device machine), record the outcome.
step() {
  local name=$1 log=$2 limit=$3; shift 3
  local t0=$SECONDS
  if timeout "$limit" "$@" >>"$OUT/$log" 2>&1; then summary+=("PASS $name ($((SECONDS - t0)) s)")
  else summary+=("FAIL $name ($((SECONDS - t0)) s): see $log"); tail -n 30 "$OUT/$log"; fi
}
nvidia-smi -L; python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
rm -rf build mymetaops/_C*.so  # a clean build: objects left by an earlier call must not be linked in
step "build (cuda/, sm_90a)" build.log 240 python3 setup.py build_ext --inplace
step "bench table" bench.log ${BENCH_LIMIT:-200} python3 bench/embedding_bag_table.py --quick --out "$OUT"
step "pytest-benchmark" pytest_bench.log 150 python3 -m pytest bench -q -m gpu \
    --benchmark-columns=median,iqr --benchmark-group-by=param:shape
# AFTER_BUILD: an optional extra command (a probe, a profile), run after the build and the benchmarks.
[ -z "${AFTER_BUILD:-}" ] || step "after build: $AFTER_BUILD" after_build.log 240 bash -c "$AFTER_BUILD"
# Tests run in 8 worker processes (pytest-xdist): a crash takes down one worker, is reported with the
# test's name, and the rest of the suite still runs.
PYTEST="python3 -m pytest -q -n ${WORKERS:-8} --timeout 240"
step "tests (cuda/ kernels; GPU and CPU)" gpu_tests.log ${TEST_LIMIT:-300} $PYTEST tests
[ "${SKIP_HIP:-0}" = 1 ] || step "build (hip/ through the shim)" build.log 180 env MYMETAOPS_HIP_ON_CUDA=1 python3 setup.py build_ext --inplace --build-temp build/hip_on_cuda_obj
[ "${SKIP_HIP:-0}" = 1 ] || step "gpu tests (hip/ kernels, shim)" gpu_tests_hip.log 240 $PYTEST -m gpu tests
echo; tail -n 3 "$OUT"/gpu_tests.log "$OUT"/gpu_tests_hip.log 2>/dev/null
cat "$OUT"/*embedding_bag.md 2>/dev/null
printf '%s\n' "${summary[@]}"
