"""Selection regret of the attention model: at each problem of a suite, the choice the dispatch
makes (the model's decision for the problem's bucket, as the public ops call it) against every
kernel that runs the problem (mymetaops/model/attention.py: the Triton tiles it offers, through
their launchers, and every native kernel built for these head dims through _C, withheld or
refused ones included: a wrong refusal counts), t(choice) / t(fastest). Each candidate is timed as
a kernel: captured once in a CUDA graph and replayed (do_bench medians), so the launchers' Python
paths, which differ from the public ops' and hide the kernel at small sizes, stay out of the times
(host_cost.py measures the public path).

Suite: 18 problems, bf16, causal, over three length distributions per (B, N, H, D): uniform in
[1, N], all equal to N, and long-tailed (Zipf-like: N / rank^1.2, shuffled); at each, the forward
and the backward of both ops (the backward's candidates: the Triton backward, native dK / dV beside
Triton's dq or the native dQ). The issue's bound: geometric mean of the regret <= 1.05, reported
over the forwards, the backwards and all.

    python bench/attention/regret.py [--out PREFIX] [--budget-s 240] [--dry-run]
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[1]))
from bench_common import add_device_arguments, close_report, geomean, median_us, open_report, short_error  # noqa: E402

SIZES = ((64, 1024, 4, 128), (256, 512, 2, 128), (512, 256, 4, 64), (16, 4096, 2, 64), (128, 256, 8, 32),
         (32, 2048, 1, 128))
DISTRIBUTIONS = ("uniform", "equal", "zipf")
DRY_RUN_SIZES = ((3, 16, 2, 16),)
BOUND = 1.05
ALPHA = 0.1
FORWARD_OPS = ("hstu_attention", "jagged_attention")
BACKWARD_OPS = ("hstu_attention_backward", "jagged_attention_backward")
OPS = FORWARD_OPS + BACKWARD_OPS


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--out", help="output prefix")
    parser.add_argument("--budget-s", type=float, default=240.0)


def lengths_of(dist: str, batch: int, n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dist == "uniform":
        return torch.randint(1, n + 1, (batch,), generator=g)
    if dist == "equal":
        return torch.full((batch,), n)
    ranks = torch.arange(1, batch + 1, dtype=torch.float64)
    lengths = (n / ranks ** 1.2).ceil().clamp(1, n).long()
    return lengths[torch.randperm(batch, generator=g)]


def kernel_us(fn, device: torch.device) -> float:
    """fn's GPU time: warmed up (its JIT compile), captured in a CUDA graph, replayed."""
    if device.type != "cuda":
        return median_us(fn, device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return median_us(graph.replay, device)


def forward_kernels(op, q, k, v, offsets, n, hw, native_built):
    """{config name: fn} for every kernel that runs this forward: the Triton tiles the model offers
    and every native kernel built for this head dim (withheld or refused ones too)."""
    from mymetaops import _C, model
    from mymetaops.ops import attention as ops
    from mymetaops.triton import hstu_attention as hstu
    from mymetaops.triton import jagged_attention as sm
    problem = model.attention.problem_of(op, q, v, offsets, n, True, False)
    fns = {}
    for config in (c.config for c in model.decide(op, problem, hw, "triton").candidates if c.backend == "triton"):
        tiles = None if config.kernel_defaults else (config.block_m, config.block_n, config.num_warps,
                                                     config.num_stages)
        if op == "hstu_attention":
            cfg = None if tiles is None else hstu.HstuConfig(*tiles)
            fns[str(config)] = lambda cfg=cfg: hstu.hstu_attention_fwd(q, k, v, offsets, n, ALPHA, config=cfg)
        else:
            cfg = None if tiles is None else sm.AttentionConfig(*tiles)
            fns[str(config)] = lambda cfg=cfg: sm.jagged_attention_fwd(q, k, v, offsets, n, config=cfg)
    kind = ops.HSTU_KIND if op == "hstu_attention" else ops.SOFTMAX_KIND
    scale = ALPHA if op == "hstu_attention" else q.shape[2] ** -0.5
    for index, row in enumerate(model.attention.NATIVE_KERNELS.get(hw.vendor, ())):
        if native_built and op in row.ops and q.shape[2] in row.dims:
            fns[row.name] = lambda index=index: _C._attention_forward_native(q, k, v, offsets, n, kind, scale, True,
                                                                            index)
    return fns


def backward_parts(op, q, k, v, grad, offsets, n):
    """{part: fn} of a causal backward: "triton_bwd" (the Triton backward, default tiles),
    "native_dkdv", "triton_dq" and "native_dq" (the native kernels and Triton's dq alone) and
    "native_fused" (dK / dV with dQ fused in: dq, dk, dv)."""
    from mymetaops import _C
    from mymetaops.ops import attention as ops
    from mymetaops.triton import hstu_attention as hstu
    from mymetaops.triton import jagged_attention as sm
    if op == "hstu_attention_backward":
        kind, scale, extra = ops.HSTU_KIND, ALPHA, ()
        triton_bwd = lambda: hstu.backward(grad, q, k, v, offsets, n, ALPHA, True, None, 0, 0)  # noqa: E731
        triton_dq = lambda: hstu.backward_dq(grad, q, k, v, offsets, n, ALPHA, True)  # noqa: E731
    else:
        kind, scale = ops.SOFTMAX_KIND, q.shape[2] ** -0.5
        out, lse = sm.jagged_attention_fwd(q, k, v, offsets, n)
        delta = sm.backward_delta(grad, out)
        extra = (lse, delta)
        triton_bwd = lambda: sm.backward(grad, q, k, v, out, lse, offsets, n, True, scale)  # noqa: E731
        triton_dq = lambda: sm.backward_dq(grad, q, k, v, lse, delta, offsets, n, True, scale)  # noqa: E731
    args = (grad, q, k, v, offsets, n, kind, scale, True, *extra)
    return dict(triton_bwd=triton_bwd, native_dkdv=lambda: _C._attention_dkdv_native(*args), triton_dq=triton_dq,
                native_dq=lambda: _C._attention_dq_native(*args),
                native_fused=lambda: _C._attention_backward_native(*args))


def backward_kernels(op, q, k, v, offsets, n, hw, native_built):
    """{config name: fn} for every kernel set that runs this backward: the Triton backward (its
    default tiles) and the model's native rows (model.attention.NATIVE_BACKWARD) at their head dims."""
    from mymetaops import model
    parts = backward_parts(op, q, k, v, torch.randn_like(q), offsets, n)
    fns = {str(model.attention.KERNEL_DEFAULTS): parts["triton_bwd"]}
    for index, row in enumerate(model.attention.NATIVE_BACKWARD.get(hw.vendor, ())):
        if native_built and q.shape[2] in row.dims:
            if index == model.attention.NATIVE_FUSED:
                fns[row.name] = parts["native_fused"]
                continue
            dq = parts["native_dq" if index == model.attention.NATIVE_DQ else "triton_dq"]
            fns[row.name] = lambda dq=dq: (parts["native_dkdv"](), dq())
    return fns


def run(args, device, prefix, meta) -> dict:
    from mymetaops import model
    from mymetaops.ops import attention as ops
    gpu = device.type == "cuda"
    hw = model.detect_hardware(device) if gpu else model.get_hardware("H200")
    native_built = gpu and ops._native_kernels_known(hw.vendor)
    started = time.perf_counter()
    rows = []
    for size in (SIZES if gpu else DRY_RUN_SIZES):
        for dist in DISTRIBUTIONS:
            if time.perf_counter() - started > args.budget_s:
                rows.append(dict(size=list(size), dist=dist, skipped=True))
                continue
            batch, n, heads, dim = size
            lengths = lengths_of(dist, batch, n)
            offsets = torch.zeros(batch + 1, dtype=torch.int64)
            offsets[1:] = lengths.cumsum(0)
            total = int(offsets[-1])
            offsets = offsets.to(device)
            q, k, v = (torch.randn(total, heads, dim, device=device, dtype=torch.bfloat16) for _ in range(3))
            for op in OPS:
                kernels = backward_kernels if op in BACKWARD_OPS else forward_kernels
                problem = model.attention.problem_of(op, q, v, offsets, n, True, False)
                decision = model.decide_bucketed(op, problem, hw, "auto", native_built).decision
                times = {}
                for name, fn in kernels(op, q, k, v, offsets, n, hw, native_built).items():
                    try:
                        times[name] = kernel_us(fn, device)
                    except Exception as e:  # noqa: BLE001
                        times[name] = None
                        rows.append(dict(size=list(size), dist=dist, op=op, error=f"{name}: {short_error(e)}"))
                measured = {k: t for k, t in times.items() if t}
                chosen = times.get(str(decision.choice.config))
                regret = chosen / min(measured.values()) if chosen and measured else None
                rows.append(dict(size=list(size), dist=dist, op=op, total=total, choice=str(decision.choice.config),
                                 predicted_us=decision.choice.time_us, times=times, regret=regret))
            del q, k, v
    summary = {}
    for what, ops_of in (("forward", FORWARD_OPS), ("backward", BACKWARD_OPS), ("all", OPS)):
        regrets = [r["regret"] for r in rows if r.get("regret") and r["op"] in ops_of]
        summary[what] = dict(geomean_regret=geomean(regrets), problems=len(regrets),
                             worst=max(regrets) if regrets else None)
    return dict(rows=rows, **summary["all"], summary=summary)


def _summary(s: dict) -> str:
    if s["geomean_regret"] is None:
        return "no problem measured"
    return f"{s['geomean_regret']:.3f} over {s['problems']} problems, worst {s['worst']:.2f}"


def markdown(meta, report) -> str:
    mean = "—" if report["geomean_regret"] is None else f"{report['geomean_regret']:.3f}"
    worst = "—" if report["worst"] is None else f"{report['worst']:.2f}"
    lines = [f"# Attention selection regret ({meta['gpu']}, {meta['date']}, torch {meta['torch']}, triton "
             f"{meta['triton']}, revision {meta['revision']})", "",
             f"Geometric mean regret over {report['problems']} problems: {mean} (bound {BOUND}); worst {worst}.", "",
             *[f"- {what}: {_summary(report['summary'][what])}" for what in ("forward", "backward")], "",
             "Candidates timed as kernels (CUDA graph replay: the launchers' host paths out).", "",
             "| B N H D | lengths | op | model's choice | predicted us | measured us per candidate | regret |",
             "|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        label = "B{} N{} H{} D{}".format(*r["size"])
        if r.get("skipped"):
            lines.append(f"| {label} | {r['dist']} | skipped: past the budget | | | | |")
        elif "error" in r:
            lines.append(f"| {label} | {r['dist']} | {r['op']} | ERROR {r['error']} | | | |")
        else:
            times = ", ".join(f"{k}: {'ERR' if t is None else f'{t:.1f}'}" for k, t in r["times"].items())
            regret = "—" if r["regret"] is None else f"{r['regret']:.3f}"
            lines.append(f"| {label} | {r['dist']} | {r['op']} | {r['choice']} | {r['predicted_us']:.1f} | {times} | "
                         f"{regret} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args, device, meta, prefix = open_report(argv if argv is not None else sys.argv[1:], __doc__, add_arguments,
                                             "attention-regret", cpu_threads=1)
    result = run(args, device, prefix, meta)
    close_report(prefix, meta, result, markdown(meta, result))
    return 0 if math.isfinite(result["geomean_regret"] or 0.0) else 1


if __name__ == "__main__":
    sys.exit(main())
