"""Run the jagged family's benchmarks in one call, each in its own process under a time limit, and
print every check, then a short summary table LAST (sections, checks passed, each failure).

    python bench/jagged/run_all.py [--out-dir bench/results] [--budget-s 240] [--quick] [--only a,b]
    python bench/jagged/run_all.py --dry-run      # CPU: every script's plumbing, fake timings (under /tmp)

Sections, in order, with their own limits (a section's script stops itself within its budget; the
process is killed past budget + a margin, and the others still run):
  host_cost     host us per call at B=4, max_L=8, D=16 vs aten; no-sync check (~15 s; limit 45 s)
  jagged_table  the nine ops, forward and backward, at the issue's two shapes, beside the anchors,
                a copy of the same bytes, int32 offsets and every forced backend (budget 150 s;
                --quick 100 s)
  varying_loop  the positional-embedding / pad / Linear / back loop, lengths redrawn every step,
                ours vs aten; decision-cache misses; no sync (budget 45 s)
Each section's budget is also capped so that the ones after it keep a reserve (RESERVE_S): with
--budget-s 240, jagged_table gets 150 s and varying_loop what is left (30-45 s); with 220
(scripts/gpu_session.sh's), 150 s and 20 s or more. One process per section: a
sticky CUDA error in one (a faulting kernel) cannot take the others down. MYMETAOPS_REVISION, if
set, is recorded as the revision (the device machine's copy may have no .git).
Outputs: <out-dir>/<date>-<gpu>-jagged.{json,md} (the table), -jagged-host_cost,
-jagged-varying_loop, and -jagged-summary.md.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from jagged_harness import checks_markdown, meta_line  # noqa: E402
from bench_common import (add_run_all_arguments, chosen_sections, device_of, prefixes_in, run_meta,  # noqa: E402
                          run_sections, sections_passed, sections_table, write_summary)

# name: (script, output suffix, budget s (normal, quick), kill margin s, minimum s worth starting)
# A section's budget is also capped so that the sections after it keep RESERVE_S each.
RESERVE_S = {"host_cost": 20, "jagged_table": 60, "varying_loop": 25}
SECTIONS = {
    "host_cost": ("host_cost.py", "jagged-host_cost", (45, 30), 15, 10),
    "jagged_table": ("jagged_table.py", "jagged", (150, 100), 45, 30),
    "varying_loop": ("varying_loop.py", "jagged-varying_loop", (45, 30), 20, 15),
}
BUDGETED = {"jagged_table", "varying_loop"}  # take --budget-s themselves


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_all_arguments(parser, 240.0, ", ".join(SECTIONS))
    return parser.parse_args(argv)


def section_command(name, args, prefix, budget):
    script = SECTIONS[name][0]
    cmd = [sys.executable, str(HERE / script), "--device", args.device, "--out", str(prefix)]
    if args.dry_run:
        cmd.append("--dry-run")
    if name in BUDGETED:
        cmd += ["--budget-s", f"{budget:.0f}"]
    if args.quick and name == "jagged_table":
        cmd += ["--warmup-ms", "5", "--rep-ms", "10", "--repeats", "1"]
    if args.quick and name == "host_cost":
        cmd += ["--calls", "1000", "--reps", "5"]
    return cmd


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    device = device_of(args)  # dry run: cpu, TRITON_INTERPRET=1 for the children too
    meta = run_meta(device)
    env = dict(os.environ)
    names = chosen_sections(args.only, list(SECTIONS))
    prefix = prefixes_in(args, meta)

    order = [n for n in SECTIONS if n in names]
    results = run_sections(order, SECTIONS, RESERVE_S, args, started,
                           lambda name, p, budget: section_command(name, args, p, budget), prefix, env,
                           drop_old_reports=True)

    all_checks = [c for r in results.values() for c in r["checks"]]
    judged = [c for c in all_checks if c["passed"] is not None]
    failed = [c for c in judged if not c["passed"]]
    # Every check first, then the short summary LAST (what a log's tail shows): the sections, the
    # count of checks passed, and each failed one.
    lines = [f"# Jagged family benchmarks on {meta_line(meta)} ({time.monotonic() - started:.0f} s)", ""]
    lines += checks_markdown(all_checks)
    lines += ["", "## Summary", ""] + sections_table(results)
    lines += ["", f"Checks: {len(judged) - len(failed)} of {len(judged)} judged passed"
                  + (", failed:" if failed else ".")]
    lines += [f"- FAIL {c['name']}: {c['shown']} (required {c['required']})" for c in failed]
    write_summary(prefix("jagged-summary"), "\n".join(lines) + "\n")
    return 0 if sections_passed(results) else 1


if __name__ == "__main__":
    sys.exit(main())
