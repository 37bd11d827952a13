#!/bin/bash
# One device call (about 8 minutes on an H100; carry .whl): the acceptance table, host cost and regret
# of main as built (the whole-sequence L2 groups of run 48 included, unrun as a build when they
# landed), then the Triton grouping patch (triton-whole-sequence-groups.patch: the same rounding in
# attention_checks.group_size) against it through regret.py's per-candidate Triton kernel times.
# The tests of main follow in a second call: bash scripts/gpu_session.sh build attention-tests.
set -uo pipefail
export DEADLINE_S=340 ATTENTION_BENCH="attention_table:200 host_cost:60 regret:200"
bash scripts/gpu_session.sh build attention-bench 2>&1 | tee $OUT/session.log | grep -E "^\| (hstu|jagged|no host)|PASS|FAIL|SKIP|geomean"
mkdir -p /tmp/main-results && tar -xzf $OUT/attention-results.tgz -C /tmp/main-results
before=$(ls /tmp/main-results/attention-results/*regret.json) || exit 1
git apply bench/attention/prepared/triton-whole-sequence-groups.patch || exit 1
timeout 200 python3 bench/attention/regret.py --out $OUT/regret-triton-groups --budget-s 160 > $OUT/regret-triton.log 2>&1
echo "regret (Triton groups) rc $?: $(grep -i geomean $OUT/regret-triton.log | tail -2)"
python3 bench/attention/prepared/compare_regret.py "$before" $OUT/regret-triton-groups.json | tail -40
