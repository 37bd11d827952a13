#!/usr/bin/env bash
# A GPU session (device machine): clean build, the benchmarks, the GPU tests, the hip/ kernels
# through the HIP-on-CUDA shim. Logs and results under $OUT (or .out/): build.log, bench.log,
# pytest-benchmark.txt, tests.log and the benchmarks' <date>-<gpu>-embedding_bag.{json,md} (at most
# 8 files come back from the device machine). Prints the results table, then a short summary, last.
#
#   bash scripts/gpu_session.sh [PART...]   PART: build, bench, gemm-tests, gemm-bench, jagged-tests,
#                                            jagged-bench, attention-tests, attention-bench, pytest-bench,
#                                            tests, hip (default: all)
# The device machine reaches no network: the CUTLASS headers' wheel (nvidia-cutlass, see
# requirements.txt) travels in .whl/ (git-ignored; `pip download nvidia-cutlass==4.2.0 -d .whl`
# here, then carry .whl) and is installed from there.
#
# One device command may run 10 minutes and the whole session takes about 15-20, so split it into
# calls made back to back (the build stays on the machine while it is warm, 30 s after a call; a
# part that needs a build makes one if there is none):
#   bash scripts/gpu_session.sh build bench                # about 8 minutes
#   bash scripts/gpu_session.sh pytest-bench tests hip     # about 7 minutes
# Each step has its own time limit, cut to what is left of DEADLINE_S (default 570 s, one call):
# a step that would not fit is skipped, so the summary always prints.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16} MYMETAOPS_CUDA_ARCHS=${MYMETAOPS_CUDA_ARCHS:-90a}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} HYPOTHESIS_PROFILE=${HYPOTHESIS_PROFILE:-quick}
DEADLINE_S=${DEADLINE_S:-570}
PARTS=${*:-build bench gemm-tests gemm-bench jagged-tests jagged-bench attention-tests attention-bench pytest-bench tests hip}
for part in $PARTS; do
  case $part in build|bench|gemm-tests|gemm-bench|jagged-tests|jagged-bench|attention-tests|attention-bench|pytest-bench|tests|hip) ;;
    *) echo "unknown part '$part'"; exit 2;; esac
done
summary=()

# step NAME LOG SECONDS COMMAND...: run with a time limit (cut to the deadline), append to the log,
# record the outcome.
step() {
  local name=$1 log=$2 limit=$3; shift 3
  local left=$((DEADLINE_S - SECONDS - 20))  # 20 s kept for the summary
  if [ "$left" -lt 30 ]; then summary+=("SKIP $name: past the session's deadline (DEADLINE_S=$DEADLINE_S)"); return; fi
  [ "$limit" -le "$left" ] || limit=$left
  local t0=$SECONDS
  echo "=== $name (limit $limit s)" >>"$OUT/$log"
  timeout "$limit" "$@" >>"$OUT/$log" 2>&1
  local rc=$?
  if [ $rc = 0 ]; then summary+=("PASS $name ($((SECONDS - t0)) s)")
  else
    [ $rc = 124 ] && rc="$rc, timed out after $limit s"
    summary+=("FAIL $name ($((SECONDS - t0)) s, exit $rc): see $log"); tail -n 30 "$OUT/$log"
  fi
}
has() { case " $PARTS " in *" $1 "*) return 0;; *) return 1;; esac; }
built() { compgen -G "mymetaops/_C*.so" >/dev/null; }
build() {
  python3 -c "import cutlass_library" 2>/dev/null ||
    python3 -m pip install -q --no-deps .whl/nvidia_cutlass-*.whl >>"$OUT/build.log" 2>&1
  step "build (cuda/, sm_$MYMETAOPS_CUDA_ARCHS)" build.log 300 python3 setup.py build_ext --inplace
}

nvidia-smi -L; python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
# pytest-xdist runs the tests in worker processes (a crash takes down one worker, is reported with
# the test's name, and the rest still runs); pytest-timeout bounds each test. Either may be missing.
PYTEST="python3 -m pytest -q"
if python3 -c "import xdist" 2>/dev/null; then PYTEST+=" -n ${WORKERS:-8}"; else echo "no pytest-xdist: tests run in one process"; fi
if python3 -c "import pytest_timeout" 2>/dev/null; then PYTEST+=" --timeout 240"; fi

if has build; then
  rm -rf build mymetaops/_C*.so  # a clean build: objects left by an earlier call must not be linked in
  build
fi
if has bench; then
  built || build
  # One process per section, each under its own limit; all add up to one report in $OUT.
  for section in host_cost:60 first_call:90 step:120 varying_loop:150 table:240; do
    step "bench ${section%%:*}" bench.log "${section##*:}" \
        python3 bench/embedding_bag/run_all.py --only "${section%%:*}" --quick --out "$OUT"
  done
  # AFTER_BUILD: an optional extra command (a probe, a profile), run after the benchmarks.
  [ -z "${AFTER_BUILD:-}" ] || step "after build: $AFTER_BUILD" bench.log 240 bash -c "$AFTER_BUILD"
fi
if has gemm-bench; then
  built || build
  # Its result files go into one archive: at most 8 files come back from the device machine.
  mkdir -p "$OUT/gemm-results"
  step "gemm bench" gemm-bench.log "${GEMM_BENCH_S:-330}" python3 bench/gemm/run_all.py \
      --out-dir "$OUT/gemm-results" --budget-s "$(( ${GEMM_BENCH_S:-330} - 20 ))" ${GEMM_BENCH_ARGS:-}
  tar -C "$OUT" -czf "$OUT/gemm-results.tgz" gemm-results && rm -rf "$OUT/gemm-results"
fi
if has gemm-tests; then
  built || build
  step "gemm tests (GPU and CPU)" tests.log 240 $PYTEST tests/gemm
fi
if has jagged-tests; then
  built || build
  step "jagged tests (GPU and CPU)" tests.log "${JAGGED_TESTS_S:-360}" $PYTEST tests/jagged
fi
if has jagged-bench; then
  built || build
  mkdir -p "$OUT/jagged-results"
  step "jagged bench" jagged-bench.log "${JAGGED_BENCH_S:-240}" python3 bench/jagged/run_all.py \
      --out-dir "$OUT/jagged-results" --budget-s "$(( ${JAGGED_BENCH_S:-240} - 20 ))"
  tar -C "$OUT" -czf "$OUT/jagged-results.tgz" jagged-results && rm -rf "$OUT/jagged-results"
fi
if has attention-tests; then
  built || build
  step "attention tests (GPU and CPU)" tests.log "${ATTENTION_TESTS_S:-240}" $PYTEST tests/attention
fi
if has attention-bench; then
  built || build
  # One process per script, each under its own limit; the results in one archive.
  mkdir -p "$OUT/attention-results"
  # ATTENTION_BENCH: the scripts and their limits (s), to split them over calls.
  for section in ${ATTENTION_BENCH:-attention_table:200 host_cost:60 path_probe:60 varying_loop:90 regret:200}; do
    name=${section%%:*} limit=${section##*:}
    budget=()  # the scripts that take one stop starting cases 40 s before their limit
    case $name in attention_table|regret|backward_probe) budget=(--budget-s $((limit - 40)));; esac
    step "attention bench $name" attention-bench.log "$limit" python3 "bench/attention/$name.py" \
        --out "$OUT/attention-results/$(date +%F)-attention-$name" "${budget[@]}"
  done
  tar -C "$OUT" -czf "$OUT/attention-results.tgz" attention-results && rm -rf "$OUT/attention-results"
fi
if has pytest-bench; then
  built || build
  step "pytest-benchmark" pytest-benchmark.txt 150 python3 -m pytest bench -q -m gpu \
      --benchmark-columns=median,iqr --benchmark-group-by=param:shape
fi
if has tests; then
  built || build
  step "tests (cuda/ kernels; GPU and CPU)" tests.log 300 $PYTEST tests
fi
if has hip; then
  step "build (hip/ through the shim)" build.log 180 env MYMETAOPS_HIP_ON_CUDA=1 python3 setup.py build_ext \
      --inplace --build-temp build/hip_on_cuda_obj
  step "gpu tests (hip/ kernels, shim)" tests.log 240 $PYTEST -m gpu tests
fi

echo
[ -f "$OUT/tests.log" ] && grep -E "(passed|failed|error)" "$OUT/tests.log" | tail -n 4
cat "$OUT"/*-embedding_bag.md 2>/dev/null
[ -f "$OUT/gemm-bench.log" ] && tail -n 40 "$OUT/gemm-bench.log"
[ -f "$OUT/jagged-bench.log" ] && tail -n 30 "$OUT/jagged-bench.log"
[ -f "$OUT/attention-bench.log" ] && grep -E "^\| (hstu|jagged_attention|no host|B[0-9]|ours|anchor)" "$OUT/attention-bench.log" | tail -n 40
echo
printf '%s\n' "${summary[@]}"
