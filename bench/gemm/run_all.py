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
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from gemm_harness import check, checks_markdown, device_of, meta_line, run_meta  # noqa: E402
from bench_common import (add_run_all_arguments, chosen_sections, prefixes_in, run_section, run_sections, sections_passed,  # noqa: E402
                          sections_table, write_summary)

# name: (script, output suffix, budget s (normal, quick), kill margin s, minimum s worth starting)
# A section's budget is also capped so that the sections after it keep RESERVE_S each.
RESERVE_S = {"host_cost": 20, "first_call": 45, "gemm_table": 60, "train_mlp": 30, "varying_loop": 25,
             "calibrate": 15}
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
    add_run_all_arguments(parser, 420.0, ", ".join(SECTIONS) + ", calibrate",
                          extra=[("--no-calibrate", dict(action="store_true"))])
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


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    device = device_of(args)  # dry run: cpu, TRITON_INTERPRET=1 for the children too
    meta = run_meta(device)
    env = dict(os.environ)
    names = chosen_sections(args.only, [*SECTIONS, "calibrate"])
    if args.no_calibrate and "calibrate" in names:
        names.remove("calibrate")
    prefix = prefixes_in(args, meta)

    order = [n for n in [*SECTIONS, "calibrate"] if n in names]
    results = run_sections(order, SECTIONS, RESERVE_S, args, started,
                           lambda name, p, budget: section_command(name, args, p, budget), prefix, env)
    if "calibrate" in names:
        table = Path(f"{prefix('gemm')}.json")
        if table.exists():
            cmd = [sys.executable, str(HERE / "calibrate.py"), str(table), "--out", str(prefix("gemm-calibration")) + ".json"]
            status, elapsed = run_section("calibrate", cmd, 90, env)
            checks = []
            try:
                fit = json.loads(Path(f"{prefix('gemm-calibration')}.json").read_text())
                if fit.get("median_abs_log_err_before") is not None:
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

    lines = [f"# GEMM family benchmarks on {meta_line(meta)} ({time.monotonic() - started:.0f} s)", ""]
    lines += sections_table(results)
    all_checks = [c for r in results.values() for c in r["checks"]]
    lines += [""] + checks_markdown(all_checks)
    write_summary(prefix("gemm-summary"), "\n".join(lines) + "\n")
    return 0 if sections_passed(results) else 1


if __name__ == "__main__":
    sys.exit(main())
