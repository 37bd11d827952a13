"""The 26-table step: one embedding_bag call per Criteo table, ours (the default wrapper) vs torch.

Tables: the Criteo Kaggle cardinalities capped at 100 000 rows, D = 64, fp32; per table `bags` bags
of uniform lengths in 1..20 (drawn per table), uniform rows, int64, mode sum. Forward alone (tables
that need no gradient, as in inference) and forward+backward (dense gradients: each output's
backward with a random gradient, no extra ops; every table's .grad set to None each step). Time per
step: wall time around back-to-back steps, synchronized before and after; median of repetitions,
ours and torch taking turns.

    python bench/embedding_bag/step.py [--steps 20] [--step-reps 7] [--device cpu --smoke]
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

# harness first: it puts this checkout on sys.path
from harness import (CRITEO_ROW_CAP, SMOKE_ROW_CAP, check, criteo_tables, interleaved_medians,
                     random_bags)
import mymetaops

NAME = "step"
BAGS = (4096, 65536)
SMOKE_BAGS = (16, 64)
MAX_LEN = 20
DIM = 64
# Required speedups over torch (torch time / ours) per number of bags: (forward, forward+backward).
REQUIRED = {4096: (0.7, 1.3), 65536: (1.0, 2.0)}
IMPLEMENTATIONS = {
    "ours": lambda i, w, o: mymetaops.embedding_bag(i, w, o, mode="sum"),
    "torch": lambda i, w, o: F.embedding_bag(i, w, o, mode="sum"),
}


def add_arguments(parser):
    parser.add_argument("--steps", type=int, default=20, help="26-table step: steps per repetition")
    parser.add_argument("--step-reps", type=int, default=7, help="26-table step: repetitions (median)")


def make_step_inputs(tables, num_bags, device, seed=0):
    """Per table (indices, offsets) and the gradient of its output."""
    g = torch.Generator().manual_seed(seed)
    bags = [random_bags(w.shape[0], num_bags, MAX_LEN, g, device) for w in tables]
    grads = [torch.randn(num_bags, w.shape[1], generator=g).to(device) for w in tables]
    return bags, grads


def forward_step(impl, tables, bags):
    def step():
        for w, (i, o) in zip(tables, bags):
            impl(i, w, o)
    return step


def training_step(impl, tables, bags, grads):
    def step():
        for w in tables:
            w.grad = None
        outs = [impl(i, w, o) for w, (i, o) in zip(tables, bags)]
        torch.autograd.backward(outs, grads)
    return step


def run(args, device):
    steps, reps = (2, 2) if args.smoke else (args.steps, args.step_reps)
    frozen = criteo_tables(device, DIM, smoke=args.smoke)
    trained = [w.clone().requires_grad_() for w in frozen]
    rows, checks = [], []
    # Smoke runs stand their sizes in for the real ones, in order.
    for num_bags, real_bags in zip(SMOKE_BAGS if args.smoke else BAGS, BAGS):
        required = REQUIRED[real_bags]
        bags, grads = make_step_inputs(frozen, num_bags, device)
        for (i, o), w in zip(bags[:3], frozen):  # both compute the same
            torch.testing.assert_close(IMPLEMENTATIONS["ours"](i, w, o), IMPLEMENTATIONS["torch"](i, w, o),
                                       rtol=1e-4, atol=1e-4)
        fns = {}
        for name, impl in IMPLEMENTATIONS.items():
            fns[("forward", name)] = forward_step(impl, frozen, bags)
            fns[("forward+backward", name)] = training_step(impl, trained, bags, grads)
        seconds = interleaved_medians(fns, steps, reps, device, warmup=1 if args.smoke else 3)
        mymetaops.check_errors()
        indices = sum(i.numel() for i, _ in bags)
        for kind, bound in zip(("forward", "forward+backward"), required):
            ours, torch_s = seconds[(kind, "ours")], seconds[(kind, "torch")]
            rows.append(dict(kind=kind, bags=num_bags, indices=indices, ours_ms=ours * 1e3,
                             torch_ms=torch_s * 1e3, speedup=torch_s / ours, required=bound))
            checks.append(check(f"26-table step, {num_bags} bags/table, {kind}: torch / ours",
                                torch_s / ours, bound, at_most=False))
    cap = SMOKE_ROW_CAP if args.smoke else CRITEO_ROW_CAP
    return dict(name=NAME, rows=rows, checks=checks, markdown=markdown(rows, steps, reps, cap))


def markdown(rows, steps, reps, cap):
    lines = [f"## The 26-table step (Criteo cardinalities capped at {cap} rows, D {DIM} fp32, bags of "
             f"1-{MAX_LEN}, int64, sum; median of {reps} x {steps} steps)", "",
             "| bags/table | indices/step | pass | ours ms | torch ms | speedup | required |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['bags']} | {r['indices']} | {r['kind']} | {r['ours_ms']:.3f} | "
                     f"{r['torch_ms']:.3f} | {r['speedup']:.2f}x | >= {r['required']}x |")
    return "\n".join(lines)


if __name__ == "__main__":
    import run_all
    run_all.main(only=[NAME])
