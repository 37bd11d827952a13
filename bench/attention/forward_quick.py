"""The forwards at the issue's four shapes, do_bench medians (L2 flushed), TFLOP/s on the useful
causal work: the Triton launchers, the public wrappers (default arguments, the model's choice) and,
on a CUDA build with native kernels, the native launcher called directly
(_C._attention_forward_native, whatever the model chooses) with its max |diff| against Triton.
The quick check that fits in a short device call.

    PYTHONPATH=. python bench/attention/forward_quick.py
"""
import torch
import triton

import mymetaops
from mymetaops import _C
from mymetaops.ops import attention as attention_ops
from mymetaops.triton import hstu_attention as hstu, jagged_attention as softmax

NATIVE = {name: i for i, name in enumerate(_C._native_attention_kernels())} if hasattr(
    _C, "_native_attention_kernels") else {}
ALPHA = 0.1


def tflops(flops, fn):
    return flops / triton.testing.do_bench(fn, warmup=10, rep=40) / 1e9


for B, N, H, D in ((64, 1024, 4, 128), (256, 512, 2, 128), (32, 4096, 4, 128), (512, 256, 4, 64)):
    g = torch.Generator().manual_seed(0)
    L = torch.randint(1, N + 1, (B,), generator=g)
    off = torch.zeros(B + 1, dtype=torch.int64)
    off[1:] = L.cumsum(0)
    T = int(off[-1])
    off = off.cuda()
    q, k, v = (torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flops = sum(4 * D * H * n * (n + 1) / 2 for n in L.tolist())
    scale = 1.0 / D ** 0.5
    row = [f"B{B} N{N} H{H} D{D}:"]
    for name, kind, launcher, public, alpha in (
            ("hstu", attention_ops.HSTU_KIND, lambda: hstu.hstu_attention_fwd(q, k, v, off, N, ALPHA),
             lambda: mymetaops.hstu_attention(q, k, v, off, N, ALPHA), ALPHA),
            ("softmax", attention_ops.SOFTMAX_KIND, lambda: softmax.jagged_attention_fwd(q, k, v, off, N)[0],
             lambda: mymetaops.jagged_attention(q, k, v, off, N), scale)):
        row.append(f"{name} triton {tflops(flops, launcher):.0f} public {tflops(flops, public):.0f}")
        kernel = next((i for n, i in NATIVE.items() if n.endswith(f"d{D}_128x128")), None)
        if kernel is not None:
            def native():
                return _C._attention_forward_native(q, k, v, off, N, kind, alpha, True, kernel)[0]
            try:
                diff = (native().float() - launcher().float()).abs().max().item()
                row.append(f"native {tflops(flops, native):.0f} (max diff {diff:.1e})")
            except RuntimeError as e:
                row.append(f"native: {str(e).splitlines()[0][:80]}")
        row.append("|")
    print(" ".join(row) + " TF", flush=True)
