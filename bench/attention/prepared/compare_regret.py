"""Triton candidates' kernel times between two regret.py reports (run 49's A/B of the Triton grouping):
per problem and Triton tile, before -> after, and the geomean speed-up per op.

    python bench/attention/prepared/compare_regret.py BEFORE.json AFTER.json
"""
import json
import math
import sys
from collections import defaultdict


def times(path):
    rows = json.load(open(path))["rows"]
    return {(tuple(r["size"]), r["dist"], r["op"], name): us for r in rows for name, us in r.get("times", {}).items()
            if not name.startswith("hopper") and us is not None}


before, after = times(sys.argv[1]), times(sys.argv[2])
speedups = defaultdict(list)
for key in sorted(before.keys() & after.keys()):
    size, dist, op, tile = key
    r = before[key] / after[key]
    speedups[op].append(r)
    print(f"B{size[0]} N{size[1]} H{size[2]} D{size[3]:<4} {dist:8} {op:26} {tile:18} "
          f"{before[key]:8.1f} -> {after[key]:8.1f} us  x{r:5.3f}")
for op, rs in speedups.items():
    print(f"{op}: geomean x{math.exp(sum(map(math.log, rs)) / len(rs)):.3f} min {min(rs):.3f} max {max(rs):.3f}")
