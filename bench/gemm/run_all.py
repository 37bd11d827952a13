"""Run the GEMM family's benchmarks in one call, each in its own process under a time limit, then
calibrate the model from the table, and print a short summary table LAST.

    python bench/gemm/run_all.py [--out-dir bench/results] [--budget-s 420] [--quick] [--only a,b]
    python bench/gemm/run_all.py --dry-run      # CPU: every script's plumbing, fake timings (under /tmp)

Sections, in order, with their own limits (a section's script stops itself within its budget; the
process is killed past budget + a margin, and the others still run):
  host_cost   per-call host cost, fp8_gemm vs torch._scaled_mm etc. (~15 s; limit 45 s)
  first_call  import + first call in fresh processes, auto and Triton-forced (~40 s; budget 60 s)
  gemm_table  the suite: auto vs every candidate and the anchors (budget 240 s; --quick 150 s)
  train_mlp   bf16 vs Fp8Linear loss curves (~20 s; budget 90 s)
  varying_loop  an MLP step with batch sizes changing every step, FP8 vs bf16, cache, no sync (budget 45 s)
  calibrate   the model's constants refitted from gemm_table's JSON (CPU, ~10 s)
Each section's budget is also capped so that the ones after it keep a reserve (RESERVE_S): with
--budget-s 300, gemm_table gets about 170 s. One process per section: a sticky CUDA error in one
(a faulting kernel) cannot take the others down. MYMETAOPS_REVISION, if set, is recorded as the
revision (the device machine's copy may have no .git).
Outputs: <out-dir>/<date>-<gpu>-gemm.{json,md} (the table), -gemm-host_cost, -gemm-first_call,
-fp8-training.{json,md,png|svg}, -gemm-varying_loop, -gemm-calibration.json and -gemm-summary.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gemm_harness import RESULTS, checks_markdown, default_prefix, device_of, meta_line, run_meta  # noqa: E402

# name: (script, output suffix, budget s (normal, quick), kill margin s, minimum s worth starting)
# A section's budget is also capped so that the sections after it keep RESERVE_S each.
RESERVE_S = {"host_cost": 20, "first_call": 45, "gemm_table": 60, "train_mlp": 30, "varying_loop": 25,
             "calibrate": 15}
STARTUP_S = 10  # a child's imports and CUDA context, before its own clock starts
SECTIONS = {
    "host_cost": ("host_cost.py", "gemm-host_cost", (45, 30), 15, 10),
    "first_call": ("first_call.py", "gemm-first_call", (60, 45), 30, 15),
    "gemm_table": ("gemm_table.py", "gemm", (240, 150), 60, 30),
    "train_mlp": ("train_mlp.py", "fp8-training", (90, 60), 30, 15),
    "varying_loop": ("varying_loop.py", "gemm-varying_loop", (45, 30), 20, 15),
}
BUDGETED = {"first_call", "gemm_table", "train_mlp", "varying_loop"}  # take --budget-s themselves


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", help=f"default {RESULTS} (dry runs: /tmp/mymetaops-bench)")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="all sections together (default 420): the GPU call's limit minus the build")
    parser.add_argument("--quick", action="store_true", help="smaller budgets and shorter timing windows")
    parser.add_argument("--only", help="comma-separated: " + ", ".join(SECTIONS) + ", calibrate")
    parser.add_argument("--no-calibrate", action="store_true")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dry-run", action="store_true", help="= --device cpu")
    return parser.parse_args(argv)


def section_command(name, args, prefix, budget):
    script = SECTIONS[name][0]
    cmd = [sys.executable, str(HERE / script), "--device", args.device, "--out", str(prefix)]
    if name in BUDGETED:
        cmd += ["--budget-s", f"{budget:.0f}"]
    if args.quick and name == "gemm_table":
        cmd += ["--warmup-ms", "5", "--rep-ms", "10"]
    if args.quick and name == "host_cost":
        cmd += ["--calls", "1000", "--reps", "5"]
    return cmd


def run_section(name, cmd, timeout, env):
    print(f"\n=== {name}: {' '.join(cmd[1:])} (limit {timeout:.0f} s)", flush=True)
    start = time.monotonic()
    try:
        rc = subprocess.run(cmd, env=env, timeout=timeout).returncode
        status = "ok" if rc == 0 else f"exit {rc}"
    except subprocess.TimeoutExpired:
        status = f"killed after {timeout:.0f} s"
    return status, time.monotonic() - start


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    device = device_of(args)  # dry run: cpu, TRITON_INTERPRET=1 for the children too
    meta = run_meta(device)
    env = dict(os.environ)
    names = args.only.split(",") if args.only else [*SECTIONS, "calibrate"]
    unknown = set(names) - set(SECTIONS) - {"calibrate"}
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}")
    if args.no_calibrate and "calibrate" in names:
        names.remove("calibrate")
    out_dir = Path(args.out_dir) if args.out_dir else default_prefix(meta, "x").parent
    out_dir.mkdir(parents=True, exist_ok=True)

    def prefix(suffix):
        return out_dir / default_prefix(meta, suffix).name

    results = {}
    order = [n for n in [*SECTIONS, "calibrate"] if n in names]
    for i, name in enumerate(order):
        if name == "calibrate":
            continue
        _, suffix, budgets, margin, minimum = SECTIONS[name]
        left = args.budget_s - (time.monotonic() - started)
        later = sum(RESERVE_S[n] for n in order[i + 1:])
        budget = min(budgets[1] if args.quick else budgets[0], left - later - STARTUP_S)
        if budget < minimum:
            results[name] = dict(status=f"skipped: {left:.0f} s left of --budget-s", elapsed_s=0.0, checks=[])
            continue
        p = prefix(suffix)
        status, elapsed = run_section(name, section_command(name, args, p, budget), budget + margin, env)
        checks = []
        try:
            checks = json.loads(Path(f"{p}.json").read_text()).get("checks", [])
        except (OSError, ValueError) as e:
            status += f"; no report ({type(e).__name__})"
        results[name] = dict(status=status, elapsed_s=elapsed, checks=checks, prefix=str(p))
    if "calibrate" in names:
        table = Path(f"{prefix('gemm')}.json")
        if table.exists():
            cmd = [sys.executable, str(HERE / "calibrate.py"), str(table), "--out", str(prefix("gemm-calibration")) + ".json"]
            status, elapsed = run_section("calibrate", cmd, 90, env)
            checks = []
            try:
                fit = json.loads(Path(f"{prefix('gemm-calibration')}.json").read_text())
                if fit.get("median_abs_log_err_before") is not None:
                    from gemm_harness import check
                    checks = [check("model: median abs(log(predicted / measured)), current constants",
                                    fit["median_abs_log_err_before"], None, True, "{:.3f}"),
                              check("model: the same after calibrate.py's fit", fit["median_abs_log_err_after"],
                                    None, True, "{:.3f}")]
                    if fit.get("holdout_after") is not None:
                        c = check("model: hold-out, fit on even shapes, odd ones evaluated (current constants)",
                                  fit["holdout_after"], None, True, "{:.3f}")
                        c["shown"] += f" ({fit['holdout_before']:.3f})"
                        checks.append(c)
            except (OSError, ValueError):
                status += "; no fit written"
            results["calibrate"] = dict(status=status, elapsed_s=elapsed, checks=checks)
        else:
            results["calibrate"] = dict(status="skipped: no gemm table", elapsed_s=0.0, checks=[])

    lines = [f"# GEMM family benchmarks on {meta_line(meta)} ({time.monotonic() - started:.0f} s)", "",
             "| section | status | seconds | report |", "|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['status']} | {r['elapsed_s']:.0f} | {Path(r['prefix']).name + '.md' if r.get('prefix') else ''} |")
    all_checks = [c for r in results.values() for c in r["checks"]]
    lines += [""] + checks_markdown(all_checks)
    text = "\n".join(lines) + "\n"
    summary = Path(f"{prefix('gemm-summary')}.md")
    summary.write_text(text)
    print(f"\nwritten: {summary}\n")
    print(text, end="", flush=True)
    return 0 if all(r["status"] == "ok" or r["status"].startswith("skipped") for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
