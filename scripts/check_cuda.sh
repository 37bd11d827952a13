#!/usr/bin/env bash
# Compiles every cuda/**/*.cu stand-alone for sm_90a and sm_100a with all warnings as errors, and
# fails if any kernel spills registers or has a stack frame (local-memory traffic on the hot path
# of a gather kernel). Prints one line per kernel and arch: registers, stack, spills. No GPU needed.
# Usage, from the repo root: scripts/check_cuda.sh
#   MAX_JOBS    files compiled at once (default 2; a CUTLASS instance takes ~3 GB of RAM)
#   PYTHON      the Python whose nvidia-cutlass package provides CUTLASS's headers (default
#               .venv/bin/python, else python3)
set -euo pipefail

CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
NVCC="$CUDA_HOME/bin/nvcc"
MAX_JOBS="${MAX_JOBS:-2}"
if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
# CUTLASS's headers, found as setup.py finds them (without importing the package).
if ! CUTLASS_SOURCE="$("$PYTHON" -c '
import importlib.util, os
spec = importlib.util.find_spec("cutlass_library")
print(os.path.join(list(spec.submodule_search_locations)[0], "source"))')" ||
    [ ! -f "$CUTLASS_SOURCE/include/cutlass/cutlass.h" ]; then
  echo "check_cuda: CUTLASS headers not found: $PYTHON -m pip install nvidia-cutlass==4.2.0" >&2
  exit 1
fi
# The flags the build passes too (setup.py, torch's cpp_extension); keep them in step: C++17, the
# standard torch < 2.13 compiles extensions with (torch >= 2.13 uses C++20: code valid in both),
# NDEBUG (no device assert(): ptxas would serialize wgmma,
# warning C7510), CUTLASS as system headers (its warnings are not ours; ptxas' still fail the
# check), and torch's COMMON_NVCC_FLAGS.
BUILD_FLAGS=(
  -std=c++17 -O3 -DNDEBUG -I csrc/include
  -isystem "$CUTLASS_SOURCE/include" -isystem "$CUTLASS_SOURCE/tools/util/include"
  -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__
  -D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr
  -gencode=arch=compute_90a,code=sm_90a
  -gencode=arch=compute_100a,code=sm_100a
)
# Checking only: the resource report, warnings as errors (nvcc front end, ptxas, host compiler),
# and one thread per arch.
CHECK_FLAGS=(-Xptxas -v -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror --threads 0)

shopt -s globstar nullglob
sources=(cuda/**/*.cu)  # a family may span a folder: cuda/<family>/*.cu
if [ ${#sources[@]} -eq 0 ]; then
  echo "check_cuda: no cuda/**/*.cu (run from the repo root)" >&2
  exit 1
fi

demangle() { if command -v c++filt >/dev/null; then c++filt; else cat; fi; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Compile in parallel (CUTLASS instances take a minute each), then report file by file.
compile() {
  local name="${1//\//_}"  # unique: cuda/a/x.cu and cuda/b/x.cu
  if "$NVCC" "${BUILD_FLAGS[@]}" "${CHECK_FLAGS[@]}" -c "$1" -o "$tmp/$name.o" \
      >"$tmp/$name.log" 2>&1; then
    echo 0 >"$tmp/$name.rc"
  else
    echo 1 >"$tmp/$name.rc"
  fi
}
for src in "${sources[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$MAX_JOBS" ]; do wait -n || true; done
  compile "$src" &
done
wait

status=0
for src in "${sources[@]}"; do
  name="${src//\//_}"
  log="$tmp/$name.log"
  if [ "$(cat "$tmp/$name.rc")" != 0 ]; then
    grep -v -E '^ptxas info|^ +[0-9]+ bytes stack frame' "$log" >&2 || true
    echo "check_cuda: $src does not compile" >&2
    status=1
    continue
  fi
  # Anything besides ptxas' resource report is a diagnostic.
  if grep -v -E '^ptxas info|^ +[0-9]+ bytes stack frame' "$log" >&2; then
    echo "check_cuda: $src has diagnostics" >&2
    status=1
  fi
  # ptxas reports wgmma serialization (one wait per wgmma instead of per batch: the attention
  # forward's diag builds ran 20-25% slower with it) as "info"; it is a defect here.
  if grep -E 'C751[0-9]|instructions are serialized' "$log" >&2; then
    echo "check_cuda: $src has serialized wgmma" >&2
    status=1
  fi
  # Per kernel, ptxas -v prints "Compiling entry function '<mangled>' for '<arch>'", then
  # "<n> bytes stack frame, <n> bytes spill stores, <n> bytes spill loads", then
  # "Used <n> registers, ...".
  if ! awk '
    /Compiling entry function/ { split($0, q, "\047"); name = q[2]; arch = q[4] }
    /bytes stack frame/ { stack = $1; st = $5; ld = $9 }
    /Used [0-9]+ registers/ {
      for (i = 1; i < NF; i++) if ($(i + 1) ~ /^registers/) regs = $i
      bad = stack != 0 || st != 0 || ld != 0
      # The warp-specialized attention forward (setmaxnreg: a 24-register producer, 240-register
      # consumers) keeps a few tile-bookkeeping scalars on the stack (<= 128 bytes, reloaded once
      # per key tile, not per score); anything more fails like any other kernel.
      if (name ~ /attention13attention_fwd/ && stack <= 128 && st <= 128 && ld <= 128) bad = 0
      if (bad) fails++
      printf "%-4s %-7s regs=%-3s stack=%-3s spill_st=%-3s spill_ld=%-3s %s\n", \
             bad ? "FAIL" : "ok", arch, regs, stack, st, ld, name
      n++
    }
    END { exit (fails > 0) }
  ' "$log" >"$tmp/$name.summary"; then
    echo "check_cuda: $src has kernels with spills or a stack frame" >&2
    status=1
  fi
  # Demangled (when c++filt is there), without the namespace and the parameter list.
  demangle <"$tmp/$name.summary" |
    sed -E 's/\(mymetaops::.*//; s/mymetaops::\(anonymous namespace\):://'
done

# Kernels per arch; none at all means the ptxas report was not understood.
counts=$(awk '{ print $2 }' /dev/null "$tmp"/*.summary | sort | uniq -c |
  awk '{ printf "%s%s: %d kernels", sep, $2, $1; sep = ", " }')
if [ -z "$counts" ]; then
  echo "check_cuda: no kernels found in the ptxas report" >&2
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "check_cuda: FAILED" >&2
  exit 1
fi
echo "check_cuda: ok (${#sources[@]} sources; $counts)"
