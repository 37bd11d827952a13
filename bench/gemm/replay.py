"""Replay the model's selection against a measured gemm table, on the CPU: for every shape whose
candidates were all timed, the dispatch's choice under the CURRENT model constants (through the
bucket, as the dispatch decides) and its measured time against the fastest measured candidate.

    python bench/gemm/replay.py bench/results/<date>-<gpu>-gemm.json[.gz] [--all]

Measuring a model change needs no GPU once a table holds every candidate's time; what it cannot
show is the time of a candidate the table never timed (reported as "untimed"). The regret here is
kernel-only (choice / fastest, both timed the same way); the table's own regret line divides the
default call path's time instead, which adds the wrapper and timing noise.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from mymetaops import model  # noqa: E402
from mymetaops.model.gemm import GemmProblem  # noqa: E402


def groups(records):
    """(section, shape, b_layout) -> {candidate name: time us}, problem dict, anchor us."""
    out = {}
    for r in records:
        key = (r["section"], r["shape"], r.get("b_layout"))
        g = out.setdefault(key, {"times": {}, "problem": None, "anchor": None})
        if r["what"] == "candidate" and r.get("time_us"):
            g["times"][r["name"]] = float(r["time_us"])
            g["problem"] = r["problem"]
        elif r["what"] == "anchor" and g["anchor"] is None and r.get("time_us"):
            g["anchor"] = float(r["time_us"])  # the first anchor: _scaled_mm rowwise / torch.mm
    return {k: g for k, g in out.items() if g["problem"]}


def replay(path: str, show_all: bool) -> dict:
    raw = Path(path).read_bytes()
    data = json.loads(gzip.decompress(raw) if path.endswith(".gz") else raw)
    hw = model.get_hardware(data["hardware"])
    complete = {s["section"] + s["shape"] + str(s.get("b_layout")): s.get("candidates_complete") in (True, "True")
                for s in data["shapes"]}
    summary = {}
    for (section, shape, layout), g in sorted(groups(data["records"]).items()):
        if not complete.get(section + shape + str(layout), False):
            continue
        problem = GemmProblem(**g["problem"])
        op = "fp8_gemm" if problem.input == "fp8" else "gemm"
        choice = model.decide_bucketed(op, problem, hw).decision.choice
        name = f"{choice.backend} {choice.config}"
        fastest = min(g["times"].values())
        measured = g["times"].get(name)
        regret = measured / fastest if measured else None
        vs_anchor = g["anchor"] / measured if measured and g["anchor"] else None
        summary.setdefault(section, []).append((shape, layout, name, regret, vs_anchor))
        if show_all or regret is None or regret > 1.05:
            print(f"{section:4} {shape:20} {str(layout)[:6]:6} {name[:44]:44} "
                  f"{'untimed' if regret is None else f'regret {regret:.3f}'}"
                  f"{f'  anchor/choice {vs_anchor:.2f}' if vs_anchor else ''}")
    for section, rows in summary.items():
        regrets = [r[3] for r in rows if r[3]]
        worst = max(rows, key=lambda r: r[3] or 0)
        ratios = [r[4] for r in rows if r[4]]
        print(f"{section}: regret geomean {math.exp(sum(map(math.log, regrets)) / len(regrets)):.3f} over "
              f"{len(regrets)} shapes ({len(rows) - len(regrets)} untimed), worst {worst[3]:.3f} ({worst[0]}); "
              f"anchor/choice geomean {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}, "
              f"min {min(ratios):.3f}")
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", help="a <date>-<gpu>-gemm.json written by gemm_table.py (or its .gz)")
    parser.add_argument("--all", action="store_true", help="every shape, not only regrets > 1.05")
    args = parser.parse_args(argv)
    replay(args.table, args.all)


if __name__ == "__main__":
    main()
