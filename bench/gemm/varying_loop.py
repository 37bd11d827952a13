"""The GEMM family as a training loop calls it: a 4-layer MLP (Fp8Linear hidden layers, as
train_mlp.py builds it) whose batch size changes every step, forward + backward, against its
nn.Linear (bf16) twin on the same batch sequence, with no synchronization inside the loop.

Reports wall time per step of each (the FP8 one includes every quantization), the decision cache's
hits and misses over the FP8 loop (a new batch size costs a miss only when it opens a new bucket),
and whether the FP8 loop ran with torch.cuda.set_sync_debug_mode("error") without a host sync.

    python bench/gemm/varying_loop.py [--steps 200] [--budget-s 45] [--out PREFIX]
    python bench/gemm/varying_loop.py --dry-run   # CPU: a few steps at small batches
"""
from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemm_harness import (add_device_arguments, check, checks_markdown, meta_line, report_main,  # noqa: E402
                          short_error, sync)
import torch  # noqa: E402

import mymetaops.ops.dispatch as dispatch  # noqa: E402
from train_mlp import WIDTHS, student, to_fp8  # noqa: E402

# Batch sizes of a recsys trainer whose batches are filtered per step: any M (not a multiple of the
# tile), from small to large, drawn once per run from a seeded generator.
BATCH_RANGE = (1000, 65536)
DRY_RUN_BATCH_RANGE = (17, 200)
WIDTH_IN = WIDTHS[0]


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-s", type=float, default=45.0, help="both loops together")
    parser.add_argument("--out", help="output prefix (default bench/results/<date>-<gpu>-gemm-varying_loop)")


def loop(net, batches, device, deadline, no_sync: bool):
    """Seconds for forward + backward over `batches` (all of them, or those before the deadline)."""
    inputs = [torch.randn(b, WIDTH_IN, device=device, dtype=torch.bfloat16) for b in batches]
    sync(device)
    if no_sync:
        torch.cuda.set_sync_debug_mode("error")
    start, done = time.perf_counter(), 0
    try:
        for x in inputs:
            net(x).float().sum().backward()
            done += 1
            if time.monotonic() > deadline:
                break
    finally:
        if no_sync:
            torch.cuda.set_sync_debug_mode("default")
    sync(device)
    return time.perf_counter() - start, done


def run(args, device):
    rng = random.Random(args.seed)
    lo, hi = DRY_RUN_BATCH_RANGE if args.dry_run else BATCH_RANGE
    steps = min(args.steps, 6) if args.dry_run else args.steps
    batches = [rng.randint(lo, hi) for _ in range(steps)]
    base = student(device, args.seed)
    fp8_net, bf16_net = to_fp8(base), base
    started = time.monotonic()
    gpu = device.type == "cuda"
    # Warm-up: one step of each at the largest batch (allocator, cuBLAS handles, the first decisions).
    for net in (fp8_net, bf16_net):
        net(torch.randn(hi, WIDTH_IN, device=device, dtype=torch.bfloat16)).float().sum().backward()
    bf16_s, n = loop(bf16_net, batches, device, started + args.budget_s / 2, no_sync=False)
    batches = batches[:n]
    before = dispatch.cache_info()
    sync_error = None
    try:
        fp8_s, n8 = loop(fp8_net, batches, device, started + args.budget_s, no_sync=gpu)
    except RuntimeError as e:  # a host sync under set_sync_debug_mode("error")
        sync_error, fp8_s, n8 = short_error(e), None, 0
    after = dispatch.cache_info()
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    done = min(n, n8) if n8 else n
    return dict(batches=batches[:done], batch_range=[lo, hi], steps=done, bf16_ms_per_step=1e3 * bf16_s / n,
                fp8_ms_per_step=1e3 * fp8_s / n8 if fp8_s else None, cache_hits=hits, cache_misses=misses,
                sync_error=sync_error, checks=[
                    check("varying loop: FP8 MLP step / bf16 MLP step (fwd+bwd, batch sizes varying)",
                          fp8_s / n8 / (bf16_s / n) if fp8_s else None, None, True),
                    check("varying loop: decision cache hit rate over the FP8 loop",
                          hits / (hits + misses) if hits + misses else None, None, False, "{:.4f}"),
                    dict(name="varying loop: no host sync in the FP8 loop (set_sync_debug_mode('error'))",
                         value=sync_error is None, shown="pass" if sync_error is None else "FAIL",
                         required="pass" if gpu else "(GPU only)", passed=(sync_error is None) if gpu else None),
                ])


def markdown(meta, result) -> str:
    r = result
    fp8 = f"{r['fp8_ms_per_step']:.2f}" if r["fp8_ms_per_step"] is not None else f"ERROR {r['sync_error']}"
    return "\n".join([
        f"# GEMM varying-batch training loop on {meta_line(meta)}", "", *checks_markdown(r["checks"]), "",
        f"MLP {' -> '.join(map(str, WIDTHS))} (bf16 parameters; hidden layers Fp8Linear in the FP8 run), "
        f"{r['steps']} steps of forward + backward, batch sizes drawn from {tuple(r['batch_range'])} (seeded; "
        f"min {min(r['batches'])}, max {max(r['batches'])}), no synchronization inside the loop.", "",
        "| run | ms/step | decision cache hits / misses |", "|---|---|---|",
        f"| torch.nn.Linear (bf16) | {r['bf16_ms_per_step']:.2f} | |",
        f"| mymetaops.nn.Fp8Linear | {fp8} | {r['cache_hits']} / {r['cache_misses']} |", ""])


def main(argv=None):
    return report_main(argv, __doc__, add_arguments, run, markdown, "gemm-varying_loop")


if __name__ == "__main__":
    sys.exit(main())
