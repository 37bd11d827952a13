"""Host cost per call of the jagged family: tiny shapes, aten's op in the same run.

Wall time per call over back-to-back calls (synchronized before and after only) at B = 4,
max_L = 8, D = 16 (bf16, int64 offsets, lengths uniform in [1, 8]; the bmm ops D = N = 16): the
GPU finishes each call sooner than the host issues the next, so this is the per-call path from
Python to the launch. Median of --reps repetitions of --calls calls; the rows take turns within
each repetition. Rows: every public op as users call it (mymetaops.<op>, every size given); the
raw op (torch.ops.mymetaops) and aten's op for the two conversions, and the torch composite a user
would write for the others (jagged_harness.specs' anchors, forward only); forward+backward of the
conversions (ours; aten's op plus the other conversion as its backward, as NJT runs it); add_ (the
floor of any launch); and on a GPU the conversion under each forced backend and the bmm under
Triton (the launch paths behind the default one). Then every op, forward and backward with all
sizes given, under torch.cuda.set_sync_debug_mode("error"): warm, and once more on new shapes
(decision-cache misses): no host sync allowed.
Limits (the issue): jagged_to_padded_dense <= 1.5x aten._jagged_to_padded_dense_forward,
dense_to_jagged <= 1.5x aten._padded_dense_to_jagged_forward.

    python bench/jagged/host_cost.py [--calls 2000] [--reps 7] [--out PREFIX] [--dry-run]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jagged_harness import (ALL_OPS, SHORT, add_device_arguments, check, checks_markdown, gpu_check,  # noqa: E402
                            make_case, meta_line, primary, report_main, short_error, specs)
from bench_common import host_cost_rows_markdown, no_sync_checks, sync_free, time_host_calls  # noqa: E402
import torch  # noqa: E402

import mymetaops  # noqa: E402
import mymetaops.ops  # noqa: E402,F401
from mymetaops import use_backend  # noqa: E402

NAME = "host_cost"
SHAPE = (4, 8, 16)  # (B, max_L, D), the tiny shape
NEW_SHAPE = (5, 12, 24)  # the sync check's decision-cache misses
BMM_D = 16
BOUND = 1.5
ANCHOR_OPS = {"jagged_to_padded_dense": "aten._jagged_to_padded_dense_forward",
              "dense_to_jagged": "aten._padded_dense_to_jagged_forward"}


def ours_row(op):
    return f"{SHORT[op]}: mymetaops.{op}"


def anchor_row(op):
    return f"{SHORT[op]}: {ANCHOR_OPS[op]}" if op in ANCHOR_OPS else f"{SHORT[op]}: torch composite ({specs()[op].anchor_name})"


# (row, its torch counterpart, bound on the ratio or None)
PAIRS = ([(ours_row(op), anchor_row(op), BOUND) for op in ANCHOR_OPS]
         + [(f"{SHORT[op]}: torch.ops.mymetaops.{op} (raw op)", anchor_row(op), None) for op in ANCHOR_OPS]
         + [(ours_row(op), anchor_row(op), None) for op in ALL_OPS if op not in ANCHOR_OPS]
         + [(f"{SHORT[op]} fwd+bwd: mymetaops", f"{SHORT[op]} fwd+bwd: aten (its backward: the other aten conversion)",
             None) for op in ANCHOR_OPS])


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--calls", type=int, default=2000, help="calls per repetition")
    parser.add_argument("--reps", type=int, default=7, help="repetitions (median)")
    parser.add_argument("--out", help="output prefix (default bench/results/<date>-<gpu>-jagged-host_cost)")


def cases(device, shape, seed=0):
    return {op: make_case(op, shape, device, seed=seed, bmm_d=BMM_D) for op in ALL_OPS}


def fwd_bwd(call, case):
    """Forward and backward (the gradients of every floating input; a fixed grad tensor)."""
    leaves = [t.detach().requires_grad_() for t in case.inputs]
    grad = torch.ones_like(primary(call(case, [t.detach() for t in case.inputs])))

    def step():
        torch.autograd.grad(primary(call(case, leaves)), leaves, grad)
    return step


def calls(device):
    cs = cases(device, SHAPE)
    sp = specs()
    floor = torch.zeros(1, device=device)
    fns = {"add_ (floor)": lambda: floor.add_(1)}
    for op in ALL_OPS:
        c, s = cs[op], sp[op]
        fns[ours_row(op)] = (lambda s=s, c=c: s.ours(c, c.inputs))
        if op in ANCHOR_OPS:
            fns[f"{SHORT[op]}: torch.ops.mymetaops.{op} (raw op)"] = (lambda s=s, c=c: s.raw(c, c.inputs))
        fns[anchor_row(op)] = (lambda s=s, c=c: s.anchor(c, c.inputs))
    for op in ANCHOR_OPS:
        c, s = cs[op], sp[op]
        fns[f"{SHORT[op]} fwd+bwd: mymetaops"] = fwd_bwd(s.ours, c)
        fns[f"{SHORT[op]} fwd+bwd: aten (its backward: the other aten conversion)"] = fwd_bwd(s.anchor, c)
    if device.type == "cuda":
        # The launch paths behind the default one (the dispatch's choice under each backend).
        def forced(backend, op):
            c, s = cs[op], sp[op]

            def call():
                with use_backend(backend):
                    s.ours(c, c.inputs)
            return call
        for backend in ("native", "triton", "vendor"):
            fns[f"{SHORT['jagged_to_padded_dense']}, backend {backend}: mymetaops.jagged_to_padded_dense"] = \
                forced(backend, "jagged_to_padded_dense")
        fns["dense_bmm, backend triton: mymetaops.jagged_dense_bmm"] = forced("triton", "jagged_dense_bmm")
        fns["softmax, backend triton: mymetaops.jagged_softmax"] = forced("triton", "jagged_softmax")
    return fns


def sync_checks(device) -> dict:
    """Every op forward + backward, all sizes given: warm (decisions cached by the timing), then
    on a new shape (decision-cache misses). Inputs are made before the check (their host-to-device
    copies are syncs of the set-up, not of the ops)."""
    out = {}
    warm = cases(device, SHAPE)
    sp = specs()
    for op in ALL_OPS:
        out[f"{op} forward+backward, warm"] = sync_free(fwd_bwd(sp[op].ours, warm[op]), device)
    new = cases(device, NEW_SHAPE, seed=1)
    steps = [fwd_bwd(sp[op].ours, new[op]) for op in ALL_OPS]  # each runs a forward for its grad's shape:
    if device.type == "cuda":                                  # the decisions are dropped, to be made again
        from mymetaops.ops import dispatch                     # under the check
        dispatch.cache_clear()

    def all_new():
        for step in steps:
            step()
    out["every op forward+backward, a new shape (decision-cache misses)"] = sync_free(all_new, device)
    return out


def run(args, device, prefix, meta):
    calls_n, reps = (20, 3) if args.dry_run else (args.calls, args.reps)
    seconds, rows = time_host_calls(calls(device), calls_n, reps, device, warmup=3 if args.dry_run else 100)
    mymetaops.check_errors()
    checks, ratios = [], {}
    gpu = device.type == "cuda"
    for ours, theirs, bound in PAIRS:
        name = f"host cost {ours} / {theirs.split(': ', 1)[1]}"
        if ours in seconds and theirs in seconds:
            ratios[ours] = seconds[ours] / seconds[theirs]
            checks.append(gpu_check(name, ratios[ours], bound, True, gpu) if bound else
                          check(name, ratios[ours], None, True))
        else:
            checks.append(dict(name=name, value=None, shown="error", required=f"<= {bound:.2f}" if bound else "(reported)",
                               passed=False if bound else None))
    for r in rows:
        r["ratio"] = ratios.get(r["call"])
    try:
        sync = sync_checks(device)
    except Exception as e:  # noqa: BLE001  (an op failing outside the sync check: reported)
        sync = {"every op forward+backward": f"FAIL: {short_error(e)}"}
    mymetaops.check_errors()
    checks += no_sync_checks(sync)
    return dict(name=NAME, shape=list(SHAPE), bmm_dim=BMM_D, calls=calls_n, reps=reps, rows=rows, sync_debug=sync,
                checks=checks)


def markdown(meta, result) -> str:
    b, l, d = result["shape"]
    lines = [f"# Jagged family host cost per call on {meta_line(meta)}", ""] + checks_markdown(result["checks"])
    lines += ["", f"## Host cost per call (B = {b}, max_L = {l}, D = {d}, bmm D = N = {result['bmm_dim']}; bf16, "
                  f"int64 offsets; median of {result['reps']} x {result['calls']} back-to-back calls, rows in turns)", ""]
    lines += host_cost_rows_markdown(result["rows"])
    return "\n".join(lines) + "\n"


def main(argv=None):
    return report_main(argv, __doc__, add_arguments, run, markdown, "jagged-host_cost")


if __name__ == "__main__":
    sys.exit(main())
