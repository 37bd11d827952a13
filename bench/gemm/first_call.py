"""First call cost of fp8_gemm: `import mymetaops` + the first call of a new shape, in a fresh process.

The child process creates the CUDA context and the inputs first (quantized with plain torch ops,
so that nothing of mymetaops runs before the clock starts), then times `import mymetaops`, the
first mymetaops.fp8_gemm call (synchronized: the decision, any JIT compile, the kernel), a second
call on a new shape (a new decision, maybe a new specialization), and the steady state of that
shape (median of 20 synchronized calls). Runs: the default backend (auto) and MYMETAOPS_BACKEND=
triton (the Triton JIT cost), each with an empty Triton cache (a new machine) and again with the
cache the first run filled.

    python bench/gemm/first_call.py [--out PREFIX] [--dry-run]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_harness import REPO, add_device_arguments, check, checks_markdown, meta_line, report_main  # noqa: E402

NAME = "first_call"
# (M, N, K) of the first call and of the second (a new shape)
SHAPES = [(4096, 4096, 4096), (1000, 720, 1536)]
SMOKE_SHAPES = [(64, 48, 32), (40, 24, 48)]
REQUIRED_S = 1.0  # import + first call, auto, empty Triton cache (the embedding_bag family's bound)

CHILD = r"""
import json, statistics, sys, time
import torch

device, shapes = torch.device(sys.argv[1]), json.loads(sys.argv[2])
sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
torch.zeros(1, device=device)  # the CUDA context, before the clock starts
fp8 = torch.float8_e4m3fnuz if device.type == "cuda" and "gfx942" in getattr(
    torch.cuda.get_device_properties(device), "gcnArchName", "") else torch.float8_e4m3fn
fmax = torch.finfo(fp8).max
calls = []
for m, n, k in shapes:
    args = []
    for rows in (m, n):
        x = torch.randn(rows, k, device=device, dtype=torch.bfloat16)
        s = x.abs().amax(1).float().clamp(min=1e-12) / fmax
        args.append(((x.float() / s[:, None]).clamp(-fmax, fmax).to(fp8), s))
    (xq, xs), (wq, ws) = args
    calls.append((xq, wq, xs, ws))
sync()
t = [time.perf_counter()]
import mymetaops
t.append(time.perf_counter())
for args in (calls[0], calls[1]):
    mymetaops.fp8_gemm(*args)
    sync()
    t.append(time.perf_counter())
steady = []
for _ in range(20):
    start = time.perf_counter()
    mymetaops.fp8_gemm(*calls[1])
    sync()
    steady.append(time.perf_counter() - start)
choices = {}
if device.type == "cuda":  # what ran (explain prints the dispatch's decision)
    for name, args in (("first", calls[0]), ("second", calls[1])):
        choice = mymetaops.explain("fp8_gemm", *args, print_result=False)[0].choice
        choices[name] = f"{choice.backend} {choice.config}"
print(json.dumps(dict(import_s=t[1] - t[0], first_call_s=t[2] - t[1], second_call_s=t[3] - t[2],
                      steady_s=statistics.median(steady), choices=choices)))
"""


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--out", help="output prefix (default bench/results/<date>-<gpu>-gemm-first_call)")
    parser.add_argument("--budget-s", type=float, default=60.0, help="all child processes together")


def child_run(device, shapes, backend, triton_cache, timeout):
    env = dict(os.environ, TRITON_CACHE_DIR=triton_cache, MYMETAOPS_BACKEND=backend)
    if device.type == "cpu":
        env.setdefault("TRITON_INTERPRET", "1")
    start = time.monotonic()
    try:
        out = subprocess.run([sys.executable, "-c", CHILD, str(device), json.dumps(shapes)], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=max(5.0, timeout))
    except subprocess.TimeoutExpired:
        return dict(error=f"timed out after {timeout:.0f} s", wall_s=time.monotonic() - start)
    if out.returncode:
        return dict(error=f"child failed ({out.returncode}): {out.stderr.strip()[-1500:]}",
                    wall_s=time.monotonic() - start)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["total_s"] = result["import_s"] + result["first_call_s"]
    result["wall_s"] = time.monotonic() - start
    return result


def run(args, device):
    shapes = SMOKE_SHAPES if args.dry_run else SHAPES
    deadline = time.monotonic() + args.budget_s
    runs = {}
    for backend in ("auto", "triton"):
        with tempfile.TemporaryDirectory(prefix="triton-cache-") as cache:
            for cache_state in ("empty Triton cache", "Triton cache filled"):
                left = deadline - time.monotonic()
                name = f"{backend}, {cache_state}"
                if left < 5:
                    runs[name] = dict(error="budget spent")
                    continue
                runs[name] = child_run(device, shapes, backend, cache, left)
                print(f"{name}: {json.dumps(runs[name])}", flush=True)
    cold = runs["auto, empty Triton cache"]
    checks = [check("fp8_gemm import + first call, fresh process, auto, empty Triton cache (s; embedding_bag's bound)",
                    cold.get("total_s"), REQUIRED_S, at_most=True, fmt="{:.3f}")]
    if cold.get("error"):
        checks[0].update(shown="error", passed=False)
    tri = runs["triton, empty Triton cache"]
    checks.append(check("fp8_gemm first call of a new shape, MYMETAOPS_BACKEND=triton, empty cache (s)",
                        tri.get("second_call_s"), None, at_most=True, fmt="{:.3f}"))
    return dict(name=NAME, shapes=shapes, runs=runs, checks=checks)


def markdown(meta, result) -> str:
    (m1, n1, k1), (m2, n2, k2) = result["shapes"]
    lines = [f"# fp8_gemm first call on {meta_line(meta)}", ""] + checks_markdown(result["checks"])
    lines += ["", f"## First call (fresh process, CUDA context and inputs made first; first call {m1}x{n1}x{k1}, "
                  f"then a new shape {m2}x{n2}x{k2}, then its steady state)", "",
              "| process | import s | first call s | import + first call s | new shape, first call s | "
              "steady state ms | choices |", "|---|---|---|---|---|---|---|"]
    for name, r in result["runs"].items():
        if r.get("error"):
            lines.append(f"| {name} | ERROR: {r['error'][:300]} | | | | | |")
            continue
        choices = "; ".join(f"{k}: {v}" for k, v in r["choices"].items())
        lines.append(f"| {name} | {r['import_s']:.3f} | {r['first_call_s']:.3f} | {r['total_s']:.3f} | "
                     f"{r['second_call_s']:.3f} | {r['steady_s'] * 1e3:.3f} | {choices} |")
    lines += ["", "First call minus steady state = the decision, the JIT compile (Triton) and the first-launch "
                  "costs; the Triton runs force MYMETAOPS_BACKEND=triton to show the compile a Triton choice costs."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    return report_main(argv, __doc__, add_arguments, run, markdown, "gemm-first_call")


if __name__ == "__main__":
    sys.exit(main())
