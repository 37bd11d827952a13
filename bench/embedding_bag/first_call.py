"""First call cost: `import mymetaops` + the first embedding_bag call, in a fresh process.

The child process creates the CUDA context and the inputs first, then times the import and the
first call on a 1M x 128 fp32 table, 65536 bags of 32 (synchronized), then the second call with a
new shape (100 000 x 64, 4096 bags of 10: a new decision), then that call again (steady state).
Run twice: with an empty Triton cache (a new machine or user) and again with the cache the first
run filled.

    python bench/embedding_bag/first_call.py [--device cpu --smoke]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from harness import REPO, check

NAME = "first_call"
BEFORE_S = 5.6  # the previous session's H200: import + first call
REQUIRED_S = 1.0
# (rows, dim, bags, bag size) of the first call and of the second (a new shape)
SHAPES = [(1_000_000, 128, 65536, 32), (100_000, 64, 4096, 10)]
SMOKE_SHAPES = [(1000, 16, 64, 4), (500, 8, 16, 3)]

CHILD = r"""
import json, sys, time
import torch

device, shapes = torch.device(sys.argv[1]), json.loads(sys.argv[2])
sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
torch.zeros(1, device=device)  # the CUDA context, before the clock starts
calls = []
for rows, dim, bags, bag_size in shapes:
    weight = torch.randn(rows, dim, device=device)
    indices = torch.randint(0, rows, (bags * bag_size,), device=device)
    calls.append((indices, weight, torch.arange(0, bags * bag_size, bag_size, device=device)))
sync()
t = [time.perf_counter()]
import mymetaops
t.append(time.perf_counter())
for args in (calls[0], calls[1], calls[1]):
    mymetaops.embedding_bag(*args, mode="sum")
    sync()
    t.append(time.perf_counter())
mymetaops.check_errors()
explained = {}
if device.type == "cuda":  # what ran (explain prints the dispatch's decision)
    for name, args in (("first", calls[0]), ("second", calls[1])):
        choice = mymetaops.explain("embedding_bag", *args, mode="sum", print_result=False)[0].choice
        explained[name] = f"{choice.backend} {choice.config}"
print(json.dumps(dict(import_s=t[1] - t[0], first_call_s=t[2] - t[1], second_call_s=t[3] - t[2],
                      repeated_call_s=t[4] - t[3], choices=explained)))
"""


def add_arguments(parser):
    pass


def child_run(device, shapes, triton_cache):
    env = dict(os.environ, TRITON_CACHE_DIR=triton_cache)
    out = subprocess.run([sys.executable, "-c", CHILD, str(device), json.dumps(shapes)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    if out.returncode:
        raise RuntimeError(f"first-call child failed ({out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["total_s"] = result["import_s"] + result["first_call_s"]
    return result


def run(args, device):
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    with tempfile.TemporaryDirectory(prefix="triton-cache-") as cache:
        runs = {"empty Triton cache": child_run(device, shapes, cache),
                "Triton cache filled": child_run(device, shapes, cache)}
    cold = runs["empty Triton cache"]["total_s"]
    checks = [check("import + first call, fresh process, empty Triton cache (s)", cold, REQUIRED_S,
                    at_most=True)]
    return dict(name=NAME, shapes=shapes, runs=runs, before_s=BEFORE_S, checks=checks,
                markdown=markdown(shapes, runs))


def markdown(shapes, runs):
    (r1, d1, b1, l1), (r2, d2, b2, l2) = shapes
    lines = [f"## First call (fresh process, CUDA context made first; first call {r1} x {d1} fp32, {b1} bags "
             f"of {l1}; second call a new shape, {r2} x {d2}, {b2} bags of {l2})", "",
             "| process | import s | first call s | import + first call s (before: "
             f"{BEFORE_S} s; required <= {REQUIRED_S} s) | second call s | repeated call s | choices |",
             "|---|---|---|---|---|---|---|"]
    for name, r in runs.items():
        choices = "; ".join(f"{k}: {v}" for k, v in r["choices"].items())
        lines.append(f"| {name} | {r['import_s']:.3f} | {r['first_call_s']:.3f} | {r['total_s']:.3f} | "
                     f"{r['second_call_s']:.3f} | {r['repeated_call_s']:.4f} | {choices} |")
    return "\n".join(lines)


if __name__ == "__main__":
    import run_all
    run_all.main(only=[NAME])
