"""Host cost per call of the attention ops, piece by piece: where the public op's 90-170 us over its
launcher (bench/attention/NOTES.md) goes.

Wall time per call over back-to-back calls at a tiny shape (B = 4, N = 16, H = 2, D = 64, bf16),
where the GPU finishes each call before the host issues the next: the per-call path from Python
to the launch. Rows, each a prefix of the public op's path:
  - torch.add_ on a tiny tensor (the floor of any launch);
  - an empty Triton kernel (Triton's launcher alone), through kernel[grid] and through the cached
    direct launch the attention launchers use (mymetaops/triton/launch.py);
  - the argument checks (`_check`, Python only);
  - the value-check kernel (its Triton launch);
  - the launcher with the default tiles (config, strides, allocation, one Triton launch);
  - the raw op (torch.ops.mymetaops.*: the custom op's dispatch into Python, checks, both launches);
  - the public wrapper, forward, and forward+backward under autograd;
  - F.scaled_dot_product_attention on the same rows as one dense batch, forward and forward+backward
    (a torch op's host cost).
Then the forward and backward of both ops under torch.cuda.set_sync_debug_mode("error").

    python bench/attention/host_cost.py [--calls 1000] [--reps 5] [--out PREFIX] [--dry-run]
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[1]))
from bench_common import (add_device_arguments, close_report, host_cost_rows_markdown, no_sync_checks,  # noqa: E402
                          open_report, sync_free, time_host_calls)

SHAPE = (4, 16, 2, 64)  # (B, N, H, D)


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--out", help="output prefix")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)


def tiny_inputs(device):
    """(seq_offsets, q, k, v) at SHAPE: lengths N, 1, N / 2, 3."""
    batch, n, heads, dim = SHAPE
    lengths = torch.tensor([n, 1, n // 2, 3])
    offsets = torch.zeros(batch + 1, dtype=torch.int64)
    offsets[1:] = lengths.cumsum(0)
    q, k, v = (torch.randn(int(lengths.sum()), heads, dim, device=device, dtype=torch.bfloat16) for _ in range(3))
    return offsets.to(device), q, k, v


def run(args, device, prefix, meta) -> dict:
    import triton
    import triton.language as tl

    import mymetaops
    from mymetaops.ops import attention as ops_attention
    from mymetaops.ops import dispatch
    from mymetaops.triton import attention_checks, hstu_attention, jagged_attention
    from mymetaops.triton.launch import Launcher

    @triton.jit
    def empty_kernel(x_ptr):
        pass

    empty_launch = Launcher(empty_kernel, {})
    batch, n, heads, dim = SHAPE
    offsets, q, k, v = tiny_inputs(device)
    total = q.shape[0]
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    grad = torch.ones(total, heads, dim, device=device, dtype=torch.bfloat16)
    dense = torch.randn(batch, heads, n, dim, device=device, dtype=torch.bfloat16)
    dense_leaves = [dense.clone().requires_grad_() for _ in range(3)]
    dense_grad = torch.ones_like(dense)
    tiny = torch.zeros(4, device=device)
    ops = torch.ops.mymetaops
    gpu = device.type == "cuda"

    def fwd_bwd(fn):
        def run():
            torch.autograd.grad(fn(*leaves), leaves, grad)
        return run

    fns = {
        "torch.add_ (tiny)": lambda: tiny.add_(1),
        "empty Triton kernel": lambda: empty_kernel[(1,)](tiny),
        "empty Triton kernel, cached launch": lambda: empty_launch((1,), tiny.device, tiny),
        "hstu: argument checks (_check)": lambda: ops_attention._check("hstu_attention", q, k, v, offsets, n),
        "hstu: launcher, default tiles": lambda: hstu_attention.hstu_attention_fwd(q, k, v, offsets, n, 0.5),
        "hstu: torch.ops.mymetaops.hstu_attention": lambda: ops.hstu_attention(q, k, v, offsets, n, 0.5),
        "hstu: mymetaops.hstu_attention": lambda: mymetaops.hstu_attention(q, k, v, offsets, n, 0.5),
        "hstu fwd+bwd: mymetaops": fwd_bwd(lambda q, k, v: mymetaops.hstu_attention(q, k, v, offsets, n, 0.5)),
        "softmax: launcher, default tiles": lambda: jagged_attention.jagged_attention_fwd(q, k, v, offsets, n),
        "softmax: mymetaops.jagged_attention": lambda: mymetaops.jagged_attention(q, k, v, offsets, n),
        "softmax fwd+bwd: mymetaops": fwd_bwd(lambda q, k, v: mymetaops.jagged_attention(q, k, v, offsets, n)),
        "torch SDPA (dense, causal)": lambda: torch.nn.functional.scaled_dot_product_attention(
            dense, dense, dense, is_causal=True),
        "torch SDPA fwd+bwd (dense, causal)": lambda: torch.autograd.grad(
            torch.nn.functional.scaled_dot_product_attention(*dense_leaves, is_causal=True), dense_leaves, dense_grad),
    }
    if gpu:
        errors = dispatch.error_record(device)
        fns["value-check kernel"] = lambda: attention_checks.check_values(offsets, None, total, n, 10, errors)
    seconds, rows = time_host_calls(fns, args.calls if gpu else 3, args.reps if gpu else 1, device,
                                    warmup=20 if gpu else 1)
    floor = seconds.get("torch.add_ (tiny)")
    for r in rows:
        r["ratio"] = r["us"] / (floor * 1e6) if r["us"] is not None and floor else None
    sync = {
        "hstu_attention fwd+bwd": sync_free(fwd_bwd(lambda q, k, v: mymetaops.hstu_attention(q, k, v, offsets, n, 0.5)),
                                            device),
        "jagged_attention fwd+bwd": sync_free(fwd_bwd(lambda q, k, v: mymetaops.jagged_attention(q, k, v, offsets, n)),
                                              device),
    }
    return dict(rows=rows, checks=no_sync_checks(sync))


def markdown(meta, report) -> str:
    lines = [f"# Attention host cost per call ({meta['gpu']}, {meta['date']}, torch {meta['torch']}, "
             f"triton {meta['triton']}, revision {meta['revision']})", "",
             "B = 4, N = 16, H = 2, D = 64, bf16; ratio: x torch.add_ on a tiny tensor.", ""]
    lines += host_cost_rows_markdown(report["rows"])
    lines += ["", "| check | result |", "|---|---|"] + [f"| {c['name']} | {c['shown']} |" for c in report["checks"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args, device, meta, prefix = open_report(argv if argv is not None else sys.argv[1:], __doc__, add_arguments,
                                             "attention-host_cost", cpu_threads=1)
    result = run(args, device, prefix, meta)
    close_report(prefix, meta, result, markdown(meta, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
