"""Run the embedding_bag benchmarks and write one combined report: <date>-<gpu>-embedding_bag.json
(every row, with GPU, torch, triton versions) and .md (the acceptance checks, then each section's
table) into --out; the markdown is printed last.

    python bench/embedding_bag/run_all.py [--out DIR] [--only host_cost,first_call,...] [--quick]
    python bench/embedding_bag/run_all.py --device cpu --smoke --out /tmp/smoke   # logic check, no GPU

Sections: host_cost (the per-call path), first_call (import + first call), step (the 26-table
step), varying_loop (decision cache and bucketing regret), table (the four shapes, every model
candidate). With --only, or when a section's script runs alone, the sections found in an existing
report of the same date and device in --out are kept, so separate runs (each under its own time
limit) add up to one report. The report is rewritten after every section.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]  # the sections and harness, run from anywhere
import torch  # noqa: E402

from harness import RESULTS, run_meta  # noqa: E402

SECTIONS = {  # in the order they run and are reported
    "host_cost": "host_cost",
    "first_call": "first_call",
    "step": "step",
    "varying_loop": "varying_loop",
    "table": "embedding_bag_table",
}


def parse_args(argv, only):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny sizes and few repetitions: checks every code path (numbers mean nothing)")
    parser.add_argument("--quick", action="store_true", help="shorter do_bench windows")
    if only is None:
        parser.add_argument("--only", help="comma-separated sections: " + ", ".join(SECTIONS))
    args = parser.parse_known_args(argv)[0]  # first the sections, whose own arguments follow
    names = only or (args.only.split(",") if args.only else list(SECTIONS))
    unknown = set(names) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    if args.device.startswith("cpu"):
        # Before any Triton kernel is defined: on the CPU, Triton runs in its interpreter.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    modules = {name: importlib.import_module(SECTIONS[name]) for name in names}
    for module in modules.values():
        module.add_arguments(parser)
    args = parser.parse_args(argv)
    return args, modules, only is not None or args.only is not None


def stem(meta):
    gpu = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in meta["gpu"].split(" (")[0])
    return f"{meta['date']}-{gpu}-embedding_bag"


def combined_markdown(meta, sections):
    lines = [f"# embedding_bag on {meta['gpu']} ({meta['date']}; torch {meta['torch']}, CUDA {meta['cuda']}, "
             f"triton {meta['triton']}, Python {meta['python']}; revision {meta['revision']})", "",
             "| check | measured | required | |", "|---|---|---|---|"]
    for section in sections.values():
        for c in section["checks"]:
            verdict = {True: "PASS", False: "FAIL", None: "n/a"}[c["passed"]]
            lines.append(f"| {c['name']} | {c['shown']} | {c['required']} | {verdict} |")
    for section in sections.values():
        lines += ["", section["markdown"]]
    return "\n".join(lines) + "\n"


def main(argv=None, only=None):
    args, modules, merge = parse_args(sys.argv[1:] if argv is None else argv, only)
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    meta = run_meta(device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{stem(meta)}.json", out / f"{stem(meta)}.md"
    sections = {}
    if merge and json_path.exists():
        sections = json.loads(json_path.read_text())["sections"]
    for name, module in modules.items():
        print(f"--- {name}", flush=True)
        sections[name] = module.run(args, device)
        sections = {n: sections[n] for n in SECTIONS if n in sections}  # report order
        json_path.write_text(json.dumps(dict(meta, sections=sections), indent=1, default=str))
        md_path.write_text(combined_markdown(meta, sections))
        print(sections[name]["markdown"], flush=True)
    print(f"\nwritten: {json_path}, {md_path}\n")
    print(md_path.read_text(), end="")


if __name__ == "__main__":
    main()
