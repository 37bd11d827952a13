"""Per-kernel speed-ups of ab_fwd.py's second run over its first (default group_pairs rows), and
whether each output digest is unchanged.  python compare.py A.json B.json"""
import json
import math
import sys


def rows(path):
    return {(r["shape"], r["dist"], r["op"], r["kernel"]): r for r in json.load(open(path))["rows"] if r["group"] is None}


a, b = rows(sys.argv[1]), rows(sys.argv[2])
ratios = {}
for key, rb in b.items():
    ra = a.get(key)
    if ra is None:
        continue
    r = ra["us"] / rb["us"]
    ratios.setdefault(key[3], []).append(r)
    print(f"{key[0]:18} {key[1]:8} {key[2]:8} {key[3]:22} {ra['us']:8.1f} -> {rb['us']:8.1f} us  x{r:5.3f}  "
          f"{'same' if ra['digest'] == rb['digest'] else 'DIFF'}")
for k, rs in ratios.items():
    print(k, "geomean speed-up", round(math.exp(sum(map(math.log, rs)) / len(rs)), 3), "min", round(min(rs), 3),
          "max", round(max(rs), 3))
