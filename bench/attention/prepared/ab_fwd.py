"""The prepared forward A/B (ab.sh): native forward kernel times by graph replay, with output digests, and a
group_pairs sweep through MYMETAOPS_DIAG_GROUP_PAIRS (needs diag-group-pairs-env.patch).

    python bench/attention/prepared/ab_fwd.py TAG OUT.json [--sweep | --sweep-only]
"""
import functools
import hashlib
import json
import os
import sys

import torch

sys.path.insert(0, "bench/attention")
sys.path.insert(0, "bench")
from regret import kernel_us, lengths_of  # noqa: E402

from mymetaops import _C  # noqa: E402
from mymetaops.ops import attention as ops  # noqa: E402

tag, out_path = sys.argv[1], sys.argv[2]
sweep_only = "--sweep-only" in sys.argv
sweep = "--sweep" in sys.argv or sweep_only
dev = torch.device("cuda")
NAMES = list(_C._native_attention_kernels())
rows = []


@functools.lru_cache(maxsize=4)  # a shape's inputs serve every kernel and group timed on it
def inputs(B, N, H, D, dist):
    L = lengths_of(dist, B, N)
    off = torch.zeros(B + 1, dtype=torch.int64)
    off[1:] = L.cumsum(0)
    T = int(off[-1])
    g = torch.Generator(device=dev).manual_seed(1)
    q, k, v = (torch.randn(T, H, D, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(3))
    flops = float(4 * D * H * (L * (L + 1) // 2).sum())
    return q, k, v, off.to(dev), flops


def measure(B, N, H, D, dist, op, kernel, group=None):
    q, k, v, off, flops = inputs(B, N, H, D, dist)
    kind = ops.HSTU_KIND if op == "hstu" else ops.SOFTMAX_KIND
    scale = 0.1 if op == "hstu" else D ** -0.5
    index = NAMES.index(kernel)
    if group is None:
        os.environ.pop("MYMETAOPS_DIAG_GROUP_PAIRS", None)
    else:
        os.environ["MYMETAOPS_DIAG_GROUP_PAIRS"] = str(group)

    def fn():
        return _C._attention_forward_native(q, k, v, off, N, kind, scale, True, index)

    o, lse = fn()
    torch.cuda.synchronize()
    digest = hashlib.sha1(o.view(torch.int16).cpu().numpy().tobytes()).hexdigest()[:12]
    us = kernel_us(fn, dev)
    os.environ.pop("MYMETAOPS_DIAG_GROUP_PAIRS", None)
    row = dict(tag=tag, shape=f"B{B} N{N} H{H} D{D}", dist=dist, op=op, kernel=kernel, group=group, us=us,
               tflops=flops / us / 1e6, digest=digest)
    rows.append(row)
    print(f"{tag:6} {row['shape']:18} {dist:8} {op:8} {kernel:22} g={group!s:5} {us:8.1f} us "
          f"{row['tflops']:6.1f} TF {digest}", flush=True)


print(NAMES, flush=True)
for B, N, H in () if sweep_only else ((256, 512, 2), (512, 256, 2), (128, 512, 4), (64, 1024, 4)):
    for dist in ("uniform", "equal", "zipf"):
        for op in ("hstu", "softmax"):
            for kernel in ("hopper_d128_64x64", "hopper_d128_128x128"):
                measure(B, N, H, 128, dist, op, kernel)
for dist in () if sweep_only else ("uniform", "zipf"):
    for op in ("hstu", "softmax"):
        measure(512, 256, 4, 64, dist, op, "hopper_d64_64x64")
        measure(16, 4096, 2, 64, dist, op, "hopper_d64_128x128")
# (B, N, H, D, lengths, op, kernel, groups); None is the launcher's own choice, timed twice for the noise.
SWEEP = [
    (64, 1024, 4, 128, "uniform", "hstu", "hopper_d128_128x128", (None, 8, 12, 16, 17, 20, 24, 32, None)),
    (64, 1024, 4, 128, "uniform", "softmax", "hopper_d128_128x128", (None, 16, 17, 32)),
    (64, 1024, 4, 128, "equal", "hstu", "hopper_d128_128x128", (None, 16, 17, 32, 64)),
    (128, 1024, 2, 128, "uniform", "hstu", "hopper_d128_128x128", (None, 16, 17, 18, 32)),
    (32, 4096, 4, 128, "uniform", "hstu", "hopper_d128_128x128", (None, 4, 8, 9, 16)),
    (256, 512, 2, 128, "equal", "hstu", "hopper_d128_64x64", (None, 32, 33, 64, 128)),
    (256, 512, 2, 128, "equal", "hstu", "hopper_d128_128x128", (None, 16, 17, 64)),
    (256, 512, 2, 128, "uniform", "hstu", "hopper_d128_64x64", (None, 32, 33, 64)),
]
for B, N, H, D, dist, op, kernel, groups in SWEEP if sweep else ():
    for group in groups:
        measure(B, N, H, D, dist, op, kernel, group)
json.dump(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows), open(out_path, "w"), indent=1)
