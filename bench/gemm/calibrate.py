"""Refit the GEMM cost model's per-kernel constants from a gemm_table run.

This is the microbenchmark side of the model: run gemm_table.py on a GPU, then this script on its
JSON (anywhere; no GPU needed), and paste the printed lines into mymetaops/model/gemm_kernels.py
(NATIVE_COST per native kernel name, TRITON_COST per vendor and input kind) and mymetaops/model/gemm.py
(VENDOR_COST per vendor op). It is never needed at call time: the dispatch only reads the
constants; nothing is measured or tuned when a user calls an op.

What it fits: each candidate's prediction depends on one KernelCost(mma_efficiency,
tile_overhead_us) -- its native kernel's, the vendor's Triton constant, or the vendor op's -- and on
the chip's numbers, which stay. Per such group, the two constants minimizing the sum of squared
log errors log(predicted / measured) over the group's timings, found by a grid search and then a
pattern search (no scipy); the predictions are recomputed with the model's own functions
(gemm.tile_estimate for native and Triton tiles, gemm.vendor_estimate with VENDOR_COST patched),
checked first against the model's candidate list at the current constants. Timings that failed or
computed a wrong result are left out. Hold-out check: fitted on the even-numbered shapes of the
suite, evaluated on the odd ones, beside the current constants on the same rows.

    python bench/gemm/calibrate.py bench/results/<date>-<gpu>-gemm.json [--min-rows 3] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gemm_harness  # noqa: E402,F401  (this checkout's mymetaops on sys.path)

from mymetaops import configs as config_types  # noqa: E402
from mymetaops import model  # noqa: E402
from mymetaops.model import costs  # noqa: E402
from mymetaops.model import gemm as gm  # noqa: E402
from mymetaops.model import gemm_kernels as gk  # noqa: E402

WRONG_REL_ERR = 5e-2  # gemm_table's: a result this far off is not a timing of the kernel
EFF_RANGE = (0.05, 1.0)
OVERHEAD_RANGE = (0.0, 20.0)
GRID_EFF = [round(0.05 * i, 2) for i in range(1, 21)]
GRID_OVERHEAD = [0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0]
FIXED_RANGE = (0.0, 30.0)
GRID_FIXED = [0.0, 2.0, 5.0, 10.0]


@dataclass
class Row:
    group: tuple  # ("native", name) | ("triton", (vendor, kind)) | ("vendor", key)
    op: str
    problem: gm.GemmProblem
    backend: str
    config: object
    measured_us: float
    shape_index: int
    label: str
    predict: Callable = field(repr=False, default=None)  # KernelCost -> predicted us


def current_cost(group, vendor) -> gk.KernelCost:
    kind, name = group
    if kind == "native":
        return gk.NATIVE_COST.get(name, gk.DEFAULT_NATIVE_COST[vendor])
    if kind == "triton":
        return gk.TRITON_COST[name]
    return gm.VENDOR_COST[(vendor, name)]


def _patched(group, vendor, cost, fn):
    """fn() with the model's constant of `group` set to `cost` (the dicts the model reads)."""
    kind, name = group
    table, key = ((gk.NATIVE_COST, name) if kind == "native" else (gk.TRITON_COST, name) if kind == "triton"
                  else (gm.VENDOR_COST, (vendor, name)))
    missing = object()
    old = table.get(key, missing)
    table[key] = cost
    try:
        return fn()
    finally:
        if old is missing:
            del table[key]
        else:
            table[key] = old


def model_prediction(op, problem, hw, backend, config):
    """The model's own prediction of one candidate at the current constants (None: not offered)."""
    for b, c, e in gm.FAMILY.candidates(op, problem, hw):
        if b == backend and c == config:
            return e.time_us
    return None


def make_predictor(row: Row, hw):
    """A fast KernelCost -> us for the row, the model's formula with a trial constant."""
    p, c = row.problem, row.config
    if row.backend == "native":
        table = gk.native_table(hw.vendor)
        if c.kernel >= len(table) or table[c.kernel].name != c.name:
            return None
        k = table[c.kernel]
        p = gm.tiled_problem(p, k)
        split = 1 if k.schedule == "stream_k" else c.split_k
        tiling = gm.Tiling(k.tile_m, k.tile_n, k.tile_k, k.cluster_m, k.cluster_n, k.schedule, split)
        launch = costs.launch_us(hw, "native")
        return lambda cost: gm.tile_estimate(p, hw, tiling, cost, launch, "", gm.HOST_US["native"],
                                             hw.vendor == "nvidia").time_us
    if row.backend == "triton":
        tiling = gm.Tiling(c.block_m, c.block_n, c.block_k, 1, 1, "persistent" if c.persistent else "data_parallel", 1)
        launch = costs.launch_us(hw, "triton")
        return lambda cost: gm.tile_estimate(p, hw, tiling, cost, launch, "", gm.HOST_US["triton"]).time_us
    return lambda cost: _patched(row.group, hw.vendor, cost, lambda: gm.vendor_estimate(p, hw).time_us)


def slow_predictor(row: Row, hw):
    return lambda cost: _patched(row.group, hw.vendor, cost,
                                 lambda: model_prediction(row.op, row.problem, hw, row.backend, row.config))


def load(path: Path):
    report = json.loads(path.read_text())
    hw = model.get_hardware(report["hardware"])
    rows, skipped = [], []
    for r in report["records"]:
        if r.get("backend") not in ("native", "triton", "vendor") or not r.get("problem"):
            continue
        if r.get("error") or r.get("time_us") is None:
            skipped.append((r["key"], r["shape"], r.get("error") or "no time"))
            continue
        if r.get("rel_err") is not None and r["rel_err"] > WRONG_REL_ERR:
            skipped.append((r["key"], r["shape"], f"wrong result (rel err {r['rel_err']:.1e})"))
            continue
        problem = gm.GemmProblem(**r["problem"])
        config = getattr(config_types, r["config_type"])(**(r["config_fields"] or {}))
        if r["backend"] == "native":
            group = ("native", config.name)
        elif r["backend"] == "triton":
            group = ("triton", gm.triton_cost_key(problem, hw))
        else:
            group = ("vendor", f"scaled_mm_{problem.scaling}" if problem.input == "fp8" else "mm")
        row = Row(group, r["op"], problem, r["backend"], config, r["time_us"], r["shape_index"],
                  f"{r['section']} {r['shape']}{' ' + r['b_layout'] if r.get('b_layout') else ''}")
        fast = make_predictor(row, hw)
        cost = current_cost(group, hw.vendor)
        reference = model_prediction(row.op, problem, hw, row.backend, config)
        if fast is not None and reference is not None and math.isclose(fast(cost), reference, rel_tol=1e-9):
            row.predict = fast
        elif reference is not None:  # the model's path changed: use it through the patched dicts
            row.predict = slow_predictor(row, hw)
        else:
            skipped.append((r["key"], r["shape"], "not a candidate of the current model (table changed?)"))
            continue
        rows.append(row)
    return report, hw, rows, skipped


def log_errors(rows, cost_of):
    return [math.log(r.predict(cost_of(r.group)) / r.measured_us) for r in rows]


def objective(rows, cost):
    return sum(math.log(r.predict(cost) / r.measured_us) ** 2 for r in rows)


def fit(rows, start: gk.KernelCost) -> gk.KernelCost:
    """Grid, then a pattern search (efficiency, per-tile overhead, fixed cost per call) from the
    best grid point (and from the current constants)."""
    candidates = [(objective(rows, gk.KernelCost(e, o, "", f)), e, o, f)
                  for e in GRID_EFF for o in GRID_OVERHEAD for f in GRID_FIXED]
    candidates.append((objective(rows, start), start.mma_efficiency, start.tile_overhead_us, start.fixed_us))
    best, e, o, f = min(candidates)
    de, do, df = 0.025, 0.25, 0.5
    steps = [(a, b, c) for a in (-1, 0, 1) for b in (-1, 0, 1) for c in (-1, 0, 1) if (a, b, c) != (0, 0, 0)]
    while de > 5e-4:
        moved = False
        for se, so, sf in steps:
            ne = min(max(e + se * de, EFF_RANGE[0]), EFF_RANGE[1])
            no = min(max(o + so * do, OVERHEAD_RANGE[0]), OVERHEAD_RANGE[1])
            nf = min(max(f + sf * df, FIXED_RANGE[0]), FIXED_RANGE[1])
            value = objective(rows, gk.KernelCost(ne, no, "", nf))
            if value < best - 1e-12:
                best, e, o, f, moved = value, ne, no, nf, True
        if not moved:
            de, do, df = de / 2, do / 2, df / 2
    return gk.KernelCost(round(e, 3), round(o, 3), "[M]", round(f, 2))


def median_abs(values):
    return statistics.median(abs(v) for v in values) if values else None


def fit_all(rows, hw, min_rows):
    groups = {}
    for r in rows:
        groups.setdefault(r.group, []).append(r)
    fitted = {}
    for group, grows in sorted(groups.items()):
        if len(grows) >= min_rows:
            fitted[group] = fit(grows, current_cost(group, hw.vendor))
    return groups, fitted


def _kc(c: gk.KernelCost, tag=True) -> str:
    tail = f", {c.tag!r}, {c.fixed_us:.2f}" if tag else (f", '[A]', {c.fixed_us:.2f}" if c.fixed_us else "")
    return f"KernelCost({c.mma_efficiency:.3f}, {c.tile_overhead_us:.3f}{tail})"


def group_name(g) -> str:
    kind, name = g
    return f"{kind} {'-'.join(name) if isinstance(name, tuple) else name}"


def source_lines(fitted, hw) -> list[str]:
    out = ["# --- mymetaops/model/gemm_kernels.py ---",
           f"# [M] fitted by bench/gemm/calibrate.py on {hw.name}"]
    natives = {g[1]: c for g, c in fitted.items() if g[0] == "native"}
    merged = dict(gk.NATIVE_COST)
    merged.update(natives)
    out.append("NATIVE_COST: dict[str, KernelCost] = {")
    out += [f"    {name!r}: {_kc(c)}," for name, c in merged.items()]
    out.append("}")
    triton = dict(gk.TRITON_COST)
    triton.update({g[1]: c for g, c in fitted.items() if g[0] == "triton"})
    out.append("TRITON_COST = {" + ", ".join(f"{v!r}: {_kc(c, c.tag != '[A]')}" for v, c in triton.items()) + "}")
    out.append("# --- mymetaops/model/gemm.py ---")
    vendor = dict(gm.VENDOR_COST)
    vendor.update({(hw.vendor, g[1]): c for g, c in fitted.items() if g[0] == "vendor"})
    out.append("VENDOR_COST = {")
    out += [f"    {k!r}: {_kc(c, c.tag != '[A]')}," for k, c in vendor.items()]
    out.append("}")
    return out


def run(path: Path, min_rows: int, out: Path | None = None):
    report, hw, rows, skipped = load(path)
    print(f"{path}: {len(rows)} timings on {report.get('gpu')} ({hw.name}), {report.get('date')}, torch "
          f"{report.get('torch')}, triton {report.get('triton')}; {len(skipped)} left out")
    if not rows:
        print("nothing to fit")
        return None
    groups, fitted = fit_all(rows, hw, min_rows)

    def cost_now(g):
        return current_cost(g, hw.vendor)

    def cost_new(g):
        return fitted.get(g, cost_now(g))
    before, after = log_errors(rows, cost_now), log_errors(rows, cost_new)
    even = [r for r in rows if r.shape_index % 2 == 0]
    odd = [r for r in rows if r.shape_index % 2 == 1]
    _, fitted_even = fit_all(even, hw, min_rows)
    hold_before = log_errors(odd, cost_now)
    hold_after = log_errors(odd, lambda g: fitted_even.get(g, cost_now(g)))

    print(f"\n{'group':44} {'rows':>4}  {'current (eff, overhead us)':28} {'fitted':22} "
          f"{'med|log err| before':>19} {'after':>7}")
    for g, grows in groups.items():
        b, a = median_abs(log_errors(grows, cost_now)), median_abs(log_errors(grows, cost_new))
        now, new = cost_now(g), fitted.get(g)
        print(f"{group_name(g):44} {len(grows):4d}  {now.mma_efficiency:.3f}, {now.tile_overhead_us:.3f}"
              f"{'':16} {(f'{new.mma_efficiency:.3f}, {new.tile_overhead_us:.3f}' if new else 'too few rows'):22} "
              f"{b:19.3f} {a:7.3f}")
    mb, ma = median_abs(before), median_abs(after)
    hb, ha = median_abs(hold_before), median_abs(hold_after)
    print(f"\nmedian |log(predicted / measured)| over all {len(rows)} timings: before {mb:.3f} "
          f"(x{math.exp(mb):.2f}), after {ma:.3f} (x{math.exp(ma):.2f})")
    if odd:
        print(f"hold-out (fitted on the {len(even)} timings of even-numbered shapes, evaluated on the {len(odd)} of "
              f"odd ones): current constants {hb:.3f} (x{math.exp(hb):.2f}), fitted {ha:.3f} (x{math.exp(ha):.2f})")
    worst = sorted(zip(after, rows), key=lambda t: -abs(t[0]))[:8]
    print("\nlargest errors after the fit (predicted / measured):")
    for e, r in worst:
        print(f"  x{math.exp(e):6.2f}  {r.backend} {r.config} on {r.label} (measured {r.measured_us:.1f} us)")
    if skipped:
        print(f"\nleft out: {len(skipped)} timings, e.g. " + "; ".join(f"{k} on {s}: {why}" for k, s, why in skipped[:5]))
    lines = source_lines(fitted, hw)
    print("\n# Paste (constants with fewer than --min-rows timings keep their current values):")
    print("\n".join(lines))
    result = dict(source=str(path), hardware=hw.name, rows=len(rows), left_out=len(skipped),
                  median_abs_log_err_before=mb, median_abs_log_err_after=ma,
                  holdout_before=hb, holdout_after=ha,
                  fitted={group_name(g): [c.mma_efficiency, c.tile_overhead_us, c.fixed_us] for g, c in fitted.items()},
                  fitted_even={group_name(g): [c.mma_efficiency, c.tile_overhead_us, c.fixed_us] for g, c in fitted_even.items()},
                  source_lines=lines)
    if out is not None:
        out.write_text(json.dumps(result, indent=1))
        print(f"\nwritten: {out}")
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path, help="a gemm_table.py report (<prefix>.json)")
    parser.add_argument("--min-rows", type=int, default=3, help="fit a group only with this many timings")
    parser.add_argument("--out", type=Path, help="also write the fit as JSON")
    parser.add_argument("--fake-candidates", action="store_true",
                        help="the fake tables of `gemm_table.py --dry-run --fake-candidates` (testing)")
    args = parser.parse_args(argv)
    if args.fake_candidates:
        import gemm_table
        gemm_table.install_fake_candidates()
    run(args.json, args.min_rows, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
