"""What the fastest attention kernels torch ships reach on the issue's shapes with no jaggedness:
SDPA's flash, cuDNN and memory-efficient backends, causal, every sequence of a batch at one length
L, for L = N (the shape's longest) and N / 2 (the mean of lengths uniform in [1, N]); beside
hstu_attention and jagged_attention (public wrappers) on the same equal lengths. Forward only,
bf16, TFLOP/s on the useful causal work 4 D H B L (L + 1) / 2, do_bench medians.

Why: the issue's HSTU forward bars (400 / 300 / 550 / 150 TF) are for jagged batches whose
sequences average N / 2 rows. The dense kernels' rate on sequences of those lengths, with every
tile full and no offsets to read, bounds what a jagged kernel can be expected to reach.

    python bench/attention/dense_ceiling.py [--out PREFIX]
    python bench/attention/dense_ceiling.py --dry-run      # CPU plumbing check (tiny shapes)
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parents[1]))  # the repo: mymetaops without an install
from attention_table import ALPHA, HSTU_FWD_BAR, SHAPES  # noqa: E402
from bench_common import add_device_arguments, close_report, median_us, open_report, short_error  # noqa: E402

DRY_RUN_SHAPES = ((2, 16, 2, 16),)
BACKENDS = ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION")


def add_arguments(parser):
    add_device_arguments(parser)
    parser.add_argument("--out", help="output prefix")


def _sdpa(backend: str | None):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    def call(q, k, v):
        if backend is None:  # the CPU dry run: whatever torch picks
            return scaled_dot_product_attention(q, k, v, is_causal=True)
        with sdpa_kernel([getattr(SDPBackend, backend)]):
            return scaled_dot_product_attention(q, k, v, is_causal=True)
    return call


def run(args, device) -> dict:
    import mymetaops
    gpu = device.type == "cuda"
    rows = []
    for index, (batch, n, heads, dim) in enumerate(SHAPES if gpu else DRY_RUN_SHAPES):
        for length in (n, n // 2):
            g = torch.Generator(device=device).manual_seed(index)
            dense = [torch.randn(batch, heads, length, dim, device=device, dtype=torch.bfloat16, generator=g)
                     for _ in range(3)]
            jagged = [t.transpose(1, 2).reshape(batch * length, heads, dim) for t in dense]
            offsets = torch.arange(batch + 1, device=device, dtype=torch.int64) * length
            flops = 4.0 * dim * heads * batch * length * (length + 1) / 2
            calls = {"hstu": lambda q, k, v: mymetaops.hstu_attention(q, k, v, offsets, length, ALPHA),
                     "softmax": lambda q, k, v: mymetaops.jagged_attention(q, k, v, offsets, length)}
            row = dict(shape=[batch, n, heads, dim], length=length, gflop=flops / 1e9,
                       hstu_bar=HSTU_FWD_BAR[index] if gpu else None)
            for name, fn in calls.items():
                try:
                    row[f"{name}_tflops"] = flops / median_us(lambda: fn(*jagged), device) / 1e6
                except Exception as e:  # noqa: BLE001
                    row[f"{name}_error"] = short_error(e)
            for backend in (BACKENDS if gpu else (None,)):
                key = f"sdpa_{(backend or 'default').lower()}"
                fn = _sdpa(backend)
                try:
                    row[f"{key}_tflops"] = flops / median_us(lambda: fn(*dense), device) / 1e6
                except Exception as e:  # noqa: BLE001 - a backend that refuses the shape
                    row[f"{key}_error"] = short_error(e)
            rows.append(row)
            del dense, jagged
    return dict(rows=rows)


def markdown(meta, report) -> str:
    sdpa = [k for k in (f"sdpa_{b.lower()}" for b in BACKENDS + ("default",))
            if any(f"{k}_tflops" in r or f"{k}_error" in r for r in report["rows"])]
    lines = [f"# Dense ceiling of the attention forward ({meta['gpu']}, {meta['date']})", "",
             f"torch {meta['torch']}, triton {meta['triton']}, revision {meta['revision']}; bf16, causal, every "
             "sequence of the batch at length L; TFLOP/s on the useful causal work. hstu / softmax: "
             "mymetaops.hstu_attention / jagged_attention on the same equal lengths (offsets 0, L, 2L, ...).", "",
             "| shape (B N H D) | L | hstu TF | softmax TF | " + " | ".join(f"{k} TF" for k in sdpa)
             + " | hstu bar (jagged, mean N/2) |",
             "|---|---|---|---|" + "---|" * len(sdpa) + "---|"]

    def cell(r, key):
        return f"{r[key + '_tflops']:.0f}" if key + "_tflops" in r else ("ERR" if key + "_error" in r else "—")
    for r in report["rows"]:
        cells = [cell(r, k) for k in ("hstu", "softmax", *sdpa)]
        lines.append(f"| {' '.join(map(str, r['shape']))} | {r['length']} | " + " | ".join(cells)
                     + f" | {r['hstu_bar'] if r['hstu_bar'] is not None else '—'} |")
    errors = [(r, k, v) for r in report["rows"] for k, v in r.items() if k.endswith("_error")]
    if errors:
        lines += ["", "Errors:"] + [f"- {r['shape']} L {r['length']} {k}: {v}" for r, k, v in errors]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args, device, meta, prefix = open_report(argv if argv is not None else sys.argv[1:], __doc__, add_arguments,
                                             "attention-dense_ceiling", cpu_threads=1)
    result = run(args, device)
    close_report(prefix, meta, result, markdown(meta, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
