#!/bin/bash
# One device call: main (+ the group_pairs override) -> + second Q buffer at D = 128 64 x 64 -> + TMA-store
# epilogue: builds, native tests, kernel times (ab_fwd.py), speed-ups (compare.py). Carry .whl.
set -uo pipefail
export MAX_JOBS=16 MYMETAOPS_CUDA_ARCHS=90a CUDA_HOME=/usr/local/cuda PYTHONUNBUFFERED=1
T0=$SECONDS
nvidia-smi -L; python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
python3 -m pip install -q --no-deps .whl/nvidia_cutlass-*.whl
b() {  # build TAG
  python3 setup.py build_ext --inplace > $OUT/build-$1.log 2>&1 || { echo "BUILD $1 FAILED"; grep -m5 -B2 -A8 "error" $OUT/build-$1.log | head -60; return 1; }
  echo "build $1 done at $((SECONDS-T0)) s"
}
t() {
  timeout 90 python3 -m pytest -q -x tests/attention/test_native_attention.py -k "every_native or backward_kernels" > $OUT/test-$1.log 2>&1
  echo "tests $1 rc $? at $((SECONDS-T0)) s: $(tail -1 $OUT/test-$1.log)"
}
m() {  # measure TAG [--sweep]
  timeout ${3:-80} python3 bench/attention/prepared/ab_fwd.py $1 $OUT/ab_$1.json ${2:-} > $OUT/ab_$1.log 2>&1; echo "ab $1 rc $? at $((SECONDS-T0)) s"
}
git apply bench/attention/prepared/diag-group-pairs-env.patch || exit 1
b main || exit 1
m main --sweep 130
git apply bench/attention/prepared/fwd-second-q-buffer-d128-64x64.patch || exit 1
b qbuf && { t qbuf; m qbuf; }
git apply bench/attention/prepared/fwd-tma-store-epilogue.patch || exit 1
b tma && { t tma; m tma; }
echo "=== main -> qbuf"; python3 bench/attention/prepared/compare.py $OUT/ab_main.json $OUT/ab_qbuf.json
echo "=== qbuf -> tma"; python3 bench/attention/prepared/compare.py $OUT/ab_qbuf.json $OUT/ab_tma.json
echo "=== sweep"; awk '/hopper_d128_128x128|hopper_d64_64x64|hopper_d128_64x64/ && / g=/' $OUT/ab_main.log | tail -35
grep -h -A30 "FAILED\|Error" $OUT/test-*.log | head -60
